"""`autosched db stats | best | import | export | prune | upgrade | show`.

The main CLI calls `add_parser(subparsers)` to add the `db` command and `run(args)` to
execute it; errors the user can fix are raised as UserError (one line, exit 2).
"""
from __future__ import annotations

import argparse
import json

from ..errors import UserError
from ..results import FAILURE_KINDS
from . import show
from .options import DB_URL_HELP


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add the `db` command and its subcommands to the main CLI's subparsers."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", metavar="URL", help=DB_URL_HELP)
    p = subparsers.add_parser("db", help="inspect and maintain the tuning-log database",
                              description="Inspect and maintain the tuning-log database.")
    sub = p.add_subparsers(dest="db_command", metavar="COMMAND", required=True)

    s = sub.add_parser("stats", parents=[common], help="records per workload, target, "
                       "machine and version, with the best latency")
    s.add_argument("--json", action="store_true", help="print the numbers as JSON")

    b = sub.add_parser("best", parents=[common], help="the fastest correct records")
    b.add_argument("--task-key", action="append", default=[], metavar="KEY",
                   help="a task key or a unique prefix of one (repeatable)")
    b.add_argument("--workload", action="append", default=[], metavar="NAME",
                   help="every task of this workload (repeatable)")
    b.add_argument("--target", metavar="T", help="only what `tune`/`export` would use "
                   "here: this target, this machine, the current TVM and space versions")
    b.add_argument("--target-key", metavar="JSON", help="only this exact target config")
    b.add_argument("--hardware-key", metavar="KEY", help="only this machine fingerprint")
    b.add_argument("-k", "--top", type=_positive, default=1, metavar="N",
                   help="the N fastest of each scope (default 1)")
    b.add_argument("--json", action="store_true", help="print the records as JSON lines")

    i = sub.add_parser("import", parents=[common], help="add records from a JSON-lines "
                       "file (duplicates are skipped; a bad line imports nothing)")
    i.add_argument("file", help="JSON-lines file, '-' for standard input")

    e = sub.add_parser("export", parents=[common], help="write records as JSON lines, "
                       "or as a MetaSchedule database (--format metaschedule)")
    e.add_argument("-o", "--output", default="-", metavar="FILE",
                   help="output file, or the directory of --format metaschedule "
                   "(default: standard output)")
    e.add_argument("--format", choices=("jsonl", "metaschedule"), default="jsonl",
                   help="jsonl: every record, one JSON line each; metaschedule: the "
                   "fastest correct record of each task whose schedule MetaSchedule can "
                   "replay, as a JSONDatabase (database_workload.json, "
                   "database_tuning_record.json)")
    e.add_argument("--task-key", action="append", default=[], metavar="KEY")
    e.add_argument("--workload", action="append", default=[], metavar="NAME")
    e.add_argument("--target-key", metavar="JSON", help="only this exact target config")
    e.add_argument("--hardware-key", metavar="KEY", help="only this machine fingerprint")
    e.add_argument("--ok-only", action="store_true", help="only correct records")
    e.add_argument("--op-file", action="append", default=[], metavar="FILE",
                   help="metaschedule: an op file defining the records' workloads "
                   "(repeatable; the database keeps their names, not their definitions)")
    e.add_argument("--top", type=_positive, default=1, metavar="N",
                   help="metaschedule: the N fastest exportable records of each task")
    e.add_argument("--all", action="store_true", help="metaschedule: every exportable "
                   "correct record of each task")

    pr = sub.add_parser("prune", parents=[common], help="keep the N fastest correct "
                        "records per task, target, machine and version; drop the rest")
    pr.add_argument("--keep", type=_positive, required=True, metavar="N")
    pr.add_argument("--drop-failures", action="store_true",
                    help="also delete failed records (by default they are kept so the "
                    "tuner never measures a known failure again)")
    pr.add_argument("--kind", action="append", default=[], choices=FAILURE_KINDS,
                    metavar="K", help="with --drop-failures: only failures of this kind "
                    "(repeatable; one of " + ", ".join(FAILURE_KINDS) + ")")
    pr.add_argument("--task-key", metavar="KEY", help="prune only this task")
    pr.add_argument("--dry-run", action="store_true", help="count, delete nothing")

    sub.add_parser("upgrade", parents=[common], help="migrate the database to the "
                   "schema of this autosched (older releases cannot open it afterwards)")
    show.add_parser(sub, [common])
    return p


def run(args: argparse.Namespace) -> int:
    """Execute a parsed `db` command; returns the exit code."""
    from ..db import open_database

    command = args.db_command
    if command == "import":  # a bad file must fail before the database is touched
        from ..db.jsonl import read_records

        args.records = read_records(args.file)
    # Only import and upgrade may create a database; the others would find it empty.
    db = open_database(args.db, upgrade=command == "upgrade",
                       create=command in ("import", "upgrade"))
    try:
        return _COMMANDS[command](db, args)
    finally:
        db.close()


def _stats(db, args) -> int:
    from .db_tables import stats_text

    stats = db.stats()
    print(json.dumps(stats, indent=1) if args.json else stats_text(stats))
    return 0


def _task_keys(db, keys: list[str], workloads: list[str]) -> list[str]:
    """Full task keys from keys, unique key prefixes and workload names."""
    tasks = db.tasks()
    known = [t["key"] for t in tasks]
    out: list[str] = []
    for prefix in keys:
        matches = [k for k in known if k.startswith(prefix)]
        if len(matches) != 1:
            what = "no task" if not matches else f"{len(matches)} tasks"
            raise UserError(f"--task-key {prefix!r} matches {what} in {db.url}")
        out.append(matches[0])
    for name in workloads:
        matches = [t["key"] for t in tasks if t["workload"] == name]
        if not matches:
            raise UserError(f"--workload {name!r}: no such workload in {db.url}")
        out.extend(matches)
    return list(dict.fromkeys(out))


def _usable_scope(target: str) -> dict:
    """What `tune`/`export` would accept here for --target (imports TVM)."""
    from search_space import SPACE_VERSION

    from ..target import resolve_target
    from ..versions import current_versions

    spec = resolve_target(target)
    versions = current_versions(SPACE_VERSION)
    return {"target_key": spec.key, "hardware_key": spec.hardware_key,
            "versions": {"tvm": versions["tvm"], "space": versions["space"]}}


def _best(db, args) -> int:
    from .db_tables import best_text

    if not args.task_key and not args.workload:
        raise UserError("db best needs --task-key or --workload (`autosched db stats` "
                        "lists them)")
    keys = set(_task_keys(db, args.task_key, args.workload))
    want = _usable_scope(args.target) if args.target else {}
    if args.target_key:
        want["target_key"] = args.target_key
    if args.hardware_key:
        want["hardware_key"] = args.hardware_key
    stats = db.stats()
    entries = []
    for g in stats["groups"]:
        if g["task_key"] not in keys or not g["ok"] or any(
                g[k] != v for k, v in want.items()):
            continue
        top = db.top_k(g["task_key"], g["target_key"], g["hardware_key"], g["versions"],
                       args.top)
        entries += [{"record": r, "rank": n, "flops": g["flops"]}
                    for n, r in enumerate(top, 1)]
    if args.json:
        for e in entries:
            print(e["record"].dumps())
    elif not entries:
        print("no correct record matches" + (" what this machine could use" if args.target
                                             else ""))
    else:
        print(best_text(entries))
    return 0


def _import(db, args) -> int:
    ids = db.add_records(args.records)
    added = sum(1 for i in ids if i is not None)
    present = len(ids) - added
    print(f"imported {added} records into {db.url} ({present} already present)")
    return 0


def _export(db, args) -> int:
    import sys

    from ..db.jsonl import write_records

    keys = _task_keys(db, args.task_key, args.workload) if (args.task_key or
                                                             args.workload) else [None]
    if args.format == "metaschedule":
        return _export_metaschedule(db, args, keys)
    if args.op_file or args.all or args.top != 1:
        raise UserError("db export: --op-file, --top and --all are for --format "
                        "metaschedule")

    def records():
        for key in keys:
            yield from db.iter_records(task_key=key, ok_only=args.ok_only,
                                       target_key=args.target_key,
                                       hardware_key=args.hardware_key)

    n = write_records(records(), args.output)
    if args.output != "-":
        print(f"exported {n} records from {db.url} to {args.output}")
    else:
        print(f"exported {n} records from {db.url}", file=sys.stderr)
    return 0


def _export_metaschedule(db, args, keys) -> int:
    from ..metaschedule_export import export_metaschedule

    if args.output == "-":
        raise UserError("db export --format metaschedule writes a directory: name it "
                        "with -o DIR")
    if args.all and args.top != 1:
        raise UserError("db export: --top N and --all exclude each other")
    summary = export_metaschedule(db, args.op_file, args.output,
                                  task_keys=[k for k in keys if k is not None],
                                  target_key=args.target_key,
                                  hardware_key=args.hardware_key,
                                  top=None if args.all else args.top)
    print(summary.line(db.url))
    return 0


def _prune(db, args) -> int:
    if args.kind and not args.drop_failures:
        raise UserError("db prune: --kind selects which failures --drop-failures deletes; "
                        "add --drop-failures")
    out = db.prune(args.keep, drop_failures=args.drop_failures, task_key=args.task_key,
                   dry_run=args.dry_run, kinds=args.kind)
    verb = "would delete" if args.dry_run else "deleted"
    print(f"{verb} {out['slow'] + out['failures']} records from {db.url} "
          f"({out['slow']} correct beyond the {args.keep} fastest of their task, target, "
          f"machine and version; {out['failures']} failures); {out['kept']} remain")
    return 0


def _upgrade(db, args) -> int:
    if db.created:
        print(f"created {db.url} at schema version {db.schema_version}")
    elif db.upgraded_from is None:
        print(f"{db.url} is at schema version {db.schema_version}; nothing to do")
    else:
        print(f"upgraded {db.url} from schema version {db.upgraded_from} "
              f"to {db.schema_version}")
    return 0


_COMMANDS = {"stats": _stats, "best": _best, "import": _import, "export": _export,
             "prune": _prune, "upgrade": _upgrade, "show": show.run}
