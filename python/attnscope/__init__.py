"""attnscope — the attnscope engine from Python (ctypes over libattnscope.so) and the
explorer's views in Jupyter.

    import attnscope
    m = attnscope.load("models/attnscope-sst2")
    r = m.run("the movie was good .", text_b="i liked it .")
    r.attentions            # numpy view [L, H, T, T] over the run's memory (no copy)
    attnscope.head_view(r)  # the explorer's head view in the notebook cell, offline

See python/README.md.
"""
from .analysis import Database, analyze, import_dir, open_db
from .core import Error, Model, Result, load, set_quiet
from .generation import Generation
from .npz import read_npz
from .views import View, ViewData, generation_view, head_view, model_view, neuron_view, overview

__all__ = ["Error", "Model", "Result", "Generation", "load", "set_quiet", "analyze", "import_dir", "open_db", "Database",
           "View", "ViewData", "generation_view", "head_view", "model_view", "neuron_view", "overview", "read_npz", "library_path"]
__version__ = "0.1.0"


def library_path():
    """Path of the libattnscope.so in use."""
    from ._lib import lib
    return lib().path
