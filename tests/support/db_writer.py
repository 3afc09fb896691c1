"""A separate writer process for concurrency and crash tests.

    python -m support.db_writer URL WORKER N BATCH   (tests/ on PYTHONPATH)

commits N records for worker WORKER, BATCH records per transaction, and prints
"committed <total>" after every commit (flushed), then "done <total>". Workers named
"shared..." all write the same candidates (duplicates expected); the others write their
own. Retries are logged on stderr.
"""
import logging
import sys

from support.records import make_rec

from autosched.db import open_database


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    url, worker, n, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    shared = worker.startswith("shared")
    if shared:
        worker = "shared"
    db = open_database(url)
    done = 0
    try:
        while done < n:
            size = min(batch, n - done)
            recs = [make_rec("mm", f"w{worker}-{done + i}", 1e-3 + (done + i) * 1e-7)
                    for i in range(size)]
            ids = db.add_records(recs)
            if not shared and any(i is None for i in ids):
                print("unexpected duplicate", flush=True)
                return 3
            done += size
            print(f"committed {done}", flush=True)
    finally:
        db.close()
    print(f"done {done}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
