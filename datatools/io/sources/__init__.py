"""The sources floor of io: any input resolved once (:mod:`~datatools.io.sources.inputs`), the table of
formats, and the document sources upper layers read; imports from the storage and formats floors."""
