import sys

try:
    from planner.cli.main import main
except KeyboardInterrupt:          # Ctrl-C before main() can catch it: the same exit, without a traceback
    print("planner: interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
