import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("EXPLORER_FORCE_CPU", "1")
os.environ.setdefault("OMP_NUM_THREADS", "2")


# The slowest test files, in the order pytest-xdist should hand them out. Under `--dist loadfile` each worker first
# takes one file and then a second, in collection order; xdist's default reordering (most tests first) gave one
# worker both test_pages.py and test_browser.py, about 1 230 s of the suite's 2 300 s of work, so that worker set
# the suite's wall time while the other ran out of work. pyproject.toml turns that reordering off
# (--no-loadscope-reorder) and this hook puts these files first: the two largest start on different workers and the
# small files fill in behind them. Order inside a file is kept (the browser load test relies on it).
HEAVY_FILES_FIRST = ("test_browser.py", "test_pages.py", "test_device_paths.py", "test_crossmpt.py",
                     "test_deep_ruot.py", "test_diffusion_planning.py", "test_softmoe_tokenization.py",
                     "test_trackstar_tda.py", "test_calnf.py", "test_scripts.py", "test_mad_td.py", "test_pqn.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(HEAVY_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))   # a stable sort: other files keep their order
