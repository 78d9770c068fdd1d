"""`python -m biosrecall ...` is the same as the `biosrecall` console script (also under torchrun)."""

from biosrecall.cli import main

if __name__ == "__main__":
    main()
