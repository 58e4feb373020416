"""``python -m opscope …``: the opscope command line (``python -m opscope record --
python train.py`` records as ``opscope record`` does)."""

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
