"""``posenc`` subcommands: one module per group, each with ``add_commands(subparsers)``."""
