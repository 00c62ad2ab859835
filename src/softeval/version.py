"""softeval's version, in a leaf module: the run writer records it, and importing the package's
``__init__`` for it would make the store layer depend on the model and task layers it loads."""

__version__ = "0.1.0"
