"""CLI commands, one module each with `register(subparsers)`; planner.cli.main lists them in COMMANDS."""
