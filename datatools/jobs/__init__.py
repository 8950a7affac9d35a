"""Jobs: work that writes data sets, resumable and atomic.

* :mod:`~datatools.jobs.pretokenize`: text in, a token store out (local process pool or Ray Data)
* :mod:`~datatools.jobs.demo_data`: the demo data set (stdlib sources, a local tokenizer, a store)
"""
