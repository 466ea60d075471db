import os
from pathlib import Path
ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault('KGQA_DATA', str(ROOT.parent/'shared'/'data'))
os.environ.setdefault('HF_HUB_OFFLINE', '1')
# caches written by tests (embeddings, indexes, LLM responses, generated benchmarks) stay in the git-ignored .cache/
os.environ.setdefault('KGQA_CACHE', str(ROOT/'.cache'/'kgqa_nb'))
