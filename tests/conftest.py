import os
from pathlib import Path
os.environ.setdefault('KGQA_DATA', str(Path(__file__).resolve().parents[2]/'shared'/'data'))
os.environ.setdefault('HF_HUB_OFFLINE', '1')
