"""CLI commands, one module each; planner.cli.main discovers every module with a `register(subparsers)`."""
