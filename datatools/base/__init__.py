"""Base: what every layer shares, and nothing else.

* :mod:`~datatools.base.checks`: documented limits (``MAX_CTX``, ...) and the argument checks that name a bad value
  (``check_int``, ``check_choice``, ``as_lengths``, ``short_repr``)
* :mod:`~datatools.base.progress`: progress on stderr (a rich bar on a terminal, a plain line every few seconds
  elsewhere), used by the jobs and the commands
"""
