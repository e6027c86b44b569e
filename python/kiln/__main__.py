"""`python -m kiln ARGS` and the `kiln` command of an installed package: the bundled compiler."""
import os
import sys


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    for exe in (os.path.join(here, "_native", "bin", "kiln"), os.path.join(here, "..", "..", "build", "kiln")):
        if os.path.exists(exe):
            os.execv(exe, [exe] + sys.argv[1:])
    sys.exit("kiln: the compiler is not installed with this package (build it: ./configure && ninja)")


if __name__ == "__main__":
    main()
