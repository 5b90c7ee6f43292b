"""`python -m bench <command>` from backend/ (`make bench ARGS=...`, `make load`); `--help` lists the commands."""

from bench.cli import main

if __name__ == "__main__":
    main()
