"""`python -m rentopt ...` runs the command line, the same as the `rentopt` script."""

from rentopt.optimizer.cli import main

if __name__ == "__main__":
    main()
