"""The peer of `omnigraph-bench blob`: read one blob of a Lance table in
4 MiB ranges through pylance's blob API (take_blobs, then read_range on the
BlobFile). Prints the median seconds of one whole read.

python3 bench/blob_pylance.py TABLE_URI COLUMN REPEATS
"""
import sys
import time

import lance

STEP = 4 << 20


def main():
    uri, column, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ds = lance.dataset(uri)
    row_ids = ds.to_table(columns=[], with_row_id=True)["_rowid"].to_pylist()
    times = []
    for _ in range(repeats):
        blob = ds.take_blobs(column, ids=row_ids[:1])[0]
        size = blob.size()
        t0 = time.perf_counter()
        at = 0
        while at < size:
            end = min(at + STEP, size)
            chunk = blob.read_range(at, end - at)
            assert len(chunk) == end - at
            at = end
        times.append(time.perf_counter() - t0)
    times.sort()
    print(times[len(times) // 2])


if __name__ == "__main__":
    main()
