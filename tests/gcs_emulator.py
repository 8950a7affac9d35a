"""gcp-storage-emulator with two things real GCS does that the emulator lacks, run as the tests' GCS server.

* A download carries ``x-goog-generation``: tensorstore's ``gcs`` driver reads a sharded array's inner chunk
  on the condition that the shard is still the generation whose index it read; without the header every
  generation is 0, which it refuses as malformed.
* A suffix range (``Range: bytes=-N``, the last N bytes) is served: real GCS does, the emulator answers it
  with the whole object.

Run as ``python tests/gcs_emulator.py start -H 127.0.0.1 --port PORT --in-memory -q`` (the emulator's own
arguments).
"""

from __future__ import annotations

import re
import sys

from gcp_storage_emulator import server
from gcp_storage_emulator.__main__ import main
from gcp_storage_emulator.handlers import objects

_download = objects.download


def download(request, response, storage, *args, **kwargs):
    """The emulator's download, with suffix ranges resolved against the object's size and the generation sent."""
    bucket, name = request.params["bucket_name"], request.params["object_id"]
    suffix = re.fullmatch(r"\s*bytes=-(\d+)\s*", request.get_header("range", "") or "")
    if suffix:
        try:
            size = len(storage.get_file(bucket, name))
        except Exception:  # not found: the emulator's own handler answers
            size = None
        if size is not None:
            request._request_handler.headers.replace_header("Range", f"bytes={max(0, size - int(suffix[1]))}-")
    _download(request, response, storage, *args, **kwargs)
    try:
        obj = storage.get_file_obj(bucket, name)
    except Exception:
        return
    response["x-goog-generation"] = str(obj.get("generation") or 1)
    response["x-goog-metageneration"] = str(obj.get("metageneration") or 1)


objects.download = download
for _, handlers in server.HANDLERS:
    for method, handler in list(handlers.items()):
        if handler is _download:
            handlers[method] = download

if __name__ == "__main__":
    sys.exit(main())
