"""``python -m server chaos``: a consistency checker shipped with the project, in the manner of
Jepsen (README.md, "Checking consistency: python -m server chaos").

It starts a world of its own on this machine (``world.py``: server processes on one database, a
fake model service), drives engine devices (``devices.py``: the real sync engine of ``webapp/``
under CPython) and Chromium pages (``browsers.py``) with seeded random operations
(``workload.py``) while a nemesis injects faults (``nemesis.py``), writes every operation and its
outcome to a history (``history.py``), heals, reads every device and the server, and counts the
anomalies (``checker.py``: a pure function of the history). ``cli.py`` wires it to the command.
"""
