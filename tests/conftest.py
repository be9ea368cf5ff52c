import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("EXPLORER_FORCE_CPU", "1")
os.environ.setdefault("OMP_NUM_THREADS", "2")
