"""``python3 -m corral_interpreter``: run the code interpreter server (see ``server.py``)."""

from .server import main

main()
