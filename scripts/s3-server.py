#!/usr/bin/env python3
"""A local S3-compatible server for the tests and benchmarks: moto's S3
application on 127.0.0.1, answering one request at a time.

Real S3 applies a conditional write (If-None-Match: *, If-Match: <etag>)
atomically; moto checks the condition and then stores, so two concurrent
requests can both pass the check. The graph's manifest compare-and-swap and
its leases rest on that atomicity, so requests are serialised here.

Usage: s3-server.py PORT [BUCKET...]   (prints "ready" once it listens)
"""
import sys
import threading
import urllib.request

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server


def main() -> None:
    port = int(sys.argv[1])
    buckets = sys.argv[2:]
    app = DomainDispatcherApplication(create_backend_app)
    one_at_a_time = threading.Lock()

    def serialised(environ, start_response):
        with one_at_a_time:
            # Materialise the body under the lock: moto builds responses eagerly.
            return list(app(environ, start_response))

    server = make_server("127.0.0.1", port, serialised, threaded=True)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    for b in buckets:
        req = urllib.request.Request(f"http://127.0.0.1:{port}/{b}", method="PUT")
        urllib.request.urlopen(req).read()
    print("ready", flush=True)
    t.join()


if __name__ == "__main__":
    main()
