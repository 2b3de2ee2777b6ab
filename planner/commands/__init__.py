"""CLI commands, one module each; planner.cli discovers every module with a `register(subparsers)`."""
