"""Training over shards: a partitioned table whose partitions are postgres_fdw foreign tables
(and local tables) trains with each shard reading its own rows through its own learnedidx and
accelerator server; only per-shard sufficient statistics cross the network (docs/indb.md,
"Training over shards").

* :func:`plan`: whether a call trains over shards: linregr (without the Breusch-Pagan test) and
  logregr (irls, newton, cg) on plain columns of a partitioned table with a postgres_fdw
  partition; any other call reads the partitions' rows through the query path, as before;
* :func:`train`: the coordinator's side: one pass per shard (linregr), or one per Newton
  iteration (logregr), on every shard at once through ``learnedidx._shard_states``
  (extension/shards.c: postgres_fdw's connections, as the caller's user mapping); the local
  partitions read through the partitioned table, here; the states merged exactly (linregr: the
  extension's ``linregr_merge_states``; logregr: the sums, stepped on this node's server);
* :func:`shard_state`: the shard's side, ``learnedidx._shard_state``: a pass over the remote
  table's columns the coordinator named, as the mapped role.

Grouping works across shards: each shard numbers its own groups and replies their values; the
coordinator matches them by value and orders them as one node would (the output table's types).
"""
from __future__ import annotations

import base64
import json
import secrets
import struct
import time
from dataclasses import dataclass, field
from typing import Any

from learnedidx.errors import NotSupportedError, ParameterError, TrainingDataError
from learnedidx.indb.udf import catalog, grouped
from learnedidx.indb.udf.session import PINNED, Session, server_result, sql_function

#: The statements of both sides, prepared once per session.
STATEMENTS = {
    "relation": ("SELECT c.relkind::pg_catalog.text AS kind, pg_catalog.row_security_active(c.oid) AS rls, "
                 "c.oid::pg_catalog.regclass::pg_catalog.text AS name FROM pg_catalog.pg_class c WHERE c.oid = $1",
                 ["oid"]),
    "leaves": ("SELECT c.oid, c.relkind::pg_catalog.text AS kind, pg_catalog.pg_get_partition_constraintdef(c.oid) "
               "AS bound, (SELECT h.proname::pg_catalog.text FROM pg_catalog.pg_foreign_table f "
               "JOIN pg_catalog.pg_foreign_server s ON s.oid = f.ftserver "
               "JOIN pg_catalog.pg_foreign_data_wrapper w ON w.oid = s.srvfdw "
               "JOIN pg_catalog.pg_proc h ON h.oid = w.fdwhandler WHERE f.ftrelid = c.oid) AS handler "
               "FROM pg_catalog.pg_partition_tree($1) t JOIN pg_catalog.pg_class c ON c.oid = t.relid "
               "WHERE t.isleaf ORDER BY t.level, c.oid", ["oid"]),
    "shard_states": ("SELECT learnedidx._shard_states($1::pg_catalog.regclass, $2::pg_catalog.regclass[], $3, $4, "
                     "$5) AS r", ["oid", "oid[]", "text[]", "jsonb[]", "text"]),
    "shard_offload": ("SELECT learnedidx._offload('indb.train', $1::pg_catalog.jsonb, $2::pg_catalog.oid::"
                      "pg_catalog.regclass, $3, $4, $5) AS r", ["text", "oid", "text[]", "text", "text"]),
    "regclass": ("SELECT $1::pg_catalog.regclass::pg_catalog.oid AS oid", ["text"]),  # 42P01 if none
    "merge": ("SELECT learnedidx.linregr_merge_states($1, $2)::pg_catalog.text AS s",
              ["learnedidx.bytea8", "learnedidx.bytea8"]),
    "xact": ("SELECT pg_catalog.now()::pg_catalog.text AS t, CURRENT_USER::pg_catalog.text AS u", []),
    "ext_version": ("SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'learnedidx'", []),
}
#: logregr's optimizers that step from the sums of a pass (igd steps row by row: not over shards).
STEPPED = {"irls": "irls", "newton": "irls", "cg": "cg"}
#: linregr's state header (runtime/lstsq.py's HEAD): version, k, n, mean, m2.
_HEAD = struct.Struct("=HHqdd")


@dataclass
class Plan:
    """A call over shards: the partitioned table, its foreign and local leaf partitions, the
    columns read (the label, the features, then the grouping columns)."""

    parent: int
    name: str
    foreign: list[int]
    local_bounds: list[str]
    columns: list[str]
    ngroups: int
    dsl: dict | None  # a DSL algorithm's settings (its server's probe)
    bytes_sent: int = 0
    bytes_received: int = 0
    calls: int = 0
    streamed: int = 0  # passes the partitions streamed (the others read rows a server kept)
    paths: set = field(default_factory=set)


def plan(db: Session, oid: int | None, request: dict, opts: dict, hetero: bool, reader: str,
         columns: list[str] | None, groups: list | None, caller_path: str) -> Plan | None:
    """The call's plan over shards, or None when it reads as before (no postgres_fdw
    partition, or a call the shards cannot merge exactly: the query path reads the rows)."""
    algorithm = request["algorithm"]
    if oid is None or reader == "query" or columns is None:
        return None
    rel = db.one("relation", oid)
    if rel["kind"] != "p" or rel["rls"]:
        return None  # (the parent's policies could not apply on the shards: the rows through postgres_fdw)
    leaves = db.run("leaves", oid)
    foreign = [r["oid"] for r in leaves if r["kind"] == "f"]
    if not foreign or any(r["kind"] == "f" and r["handler"] != "postgres_fdw_handler" for r in leaves):
        return None
    if algorithm == "logregr" and opts.get("optimizer", "irls") not in STEPPED:
        return None
    if groups is not None and any(g.expression is not None for g in groups):
        return None
    settings = None
    if algorithm not in catalog.BUILTINS:  # a DSL algorithm: accumulate ones (its server says)
        settings = _step(db, request, {"probe": True, "groups": []}, caller_path, opts)[0]
        if not settings["sharded"]:
            return None
    elif algorithm not in catalog.SHARDED or hetero:
        return None
    group_cols = [] if groups is None else [g.name for g in groups]
    return Plan(oid, rel["name"], foreign, [r["bound"] for r in leaves if r["kind"] == "r"],
                columns + group_cols, len(group_cols), settings)


# ---------------------------------------------------------------------------- the coordinator
class _Shards:
    """The passes of one call: every foreign partition's through _shard_states, then the local
    partitions' through the partitioned table; replies as (raw server reply, keys or None)."""

    def __init__(self, db: Session, p: Plan, version: str) -> None:
        self.db, self.p, self.version = db, p, version

    def run(self, request: dict, per_part: list[dict] | None = None) -> list[tuple[dict, list[str] | None]]:
        p, db = self.p, self.db
        reqs = [json.dumps(r) for r in (per_part or [{**request, "ngroups": p.ngroups}] * (len(p.foreign) + 1))]
        remote = db.one("shard_states", p.parent, p.foreign, p.columns, reqs[:len(p.foreign)], self.version)["r"]
        p.calls += 1
        p.bytes_sent += sum(len(r) for r in reqs[:len(p.foreign)])
        p.bytes_received += sum(len(r) for r in remote)
        out = []
        for text in remote:
            r = json.loads(text)
            out.append((server_result(r["reply"]), None if r["keys"] is None else r["keys"]))
        if p.local_bounds:
            local_from = "(SELECT * FROM %s WHERE %s)" % (p.name, " OR ".join("(%s)" % b for b in p.local_bounds))
            req = json.loads(reqs[-1])
            _kept_token(db, db.SD, req["params"]["shard_pass"], [p.parent, p.columns, p.ngroups])
            raw, keys = _pass(db, req, None, local_from, p.columns, p.ngroups)
            out.append((server_result(raw), keys))
        for reply, _ in out:
            if reply.get("timings", {}).get("passes"):
                p.paths.add(reply.get("path"))
                p.streamed += reply["timings"]["passes"]
        return out


def _pass(db: Session, req: dict, oid: int | None, from_sql: str, columns: list[str], ngroups: int
          ) -> tuple[str, dict | None]:
    """A pass over ``columns`` of ``from_sql`` (pages when ``oid`` is given and no grouping),
    this node's server computing the request's statistics: (raw reply, keys)."""
    req.pop("ngroups", None)
    cols = [db.quote_ident(c) for c in columns]
    feats, gcols = cols[:len(cols) - ngroups], cols[len(cols) - ngroups:]
    if not ngroups:
        query = "SELECT %s FROM %s AS src" % (", ".join(feats), from_sql)
        return db.one("shard_offload", json.dumps(req), oid, columns if oid is not None else None, query,
                      PINNED)["r"], None
    req["params"]["grouped"] = True
    query = "SELECT %s, (pg_catalog.dense_rank() OVER (ORDER BY %s))::pg_catalog.float8 FROM %s AS src" % (
        ", ".join(feats), ", ".join(gcols), from_sql)
    raw, keys = grouped.offload(db, req, query, [(str(i), g) for i, g in enumerate(gcols)], from_sql, PINNED)
    return raw, keys


def _key(obj_text: str, ngroups: int) -> str:
    """A group's values (a shard's {"0": v0, ...}) as one matching key."""
    obj = json.loads(obj_text)
    return json.dumps([obj[str(i)] for i in range(ngroups)])


class _Groups:
    """The groups of every shard matched by value: each shard's numbers -> a global key."""

    def __init__(self, replies: list[tuple[dict, dict | None]], ngroups: int) -> None:
        self.local: list[dict] = []  # per shard: its group number (text) -> key
        self.rows: dict[str, int] = {}
        # what the first pass read (later passes may use the rows the shards kept)
        self.skipped = sum(r.get("num_rows_skipped", 0) for r, _ in replies)
        self.features_form = replies[0][0].get("features_form")
        for _, keys in replies:
            m = {}
            if keys is None:
                m["None"] = "null"
            else:
                for i, (k, n) in enumerate(zip(keys["keys"], keys["rows"])):
                    key = _key(k, ngroups)
                    m[str(i + 1)] = key
                    self.rows[key] = self.rows.get(key, 0) + n
            self.local.append(m)

    def by_key(self, replies: list[tuple[dict, dict | None]]) -> dict[str, list[dict]]:
        """Each group's replies (key -> the shards' group replies, in shard order)."""
        out: dict[str, list[dict]] = {}
        for s, (reply, _) in enumerate(replies):
            for g in reply["groups"]:
                out.setdefault(self.local[s][str(g["group"])], []).append(g)
        return out


def _b64_to_bytea8(s: str) -> str:
    return "\\x" + base64.b64decode(s).hex()


def _linregr(db: Session, sh: _Shards, request: dict) -> tuple[dict[str, dict], dict]:
    replies = sh.run(request)
    groups = _Groups(replies, sh.p.ngroups)
    lead = request["params"].get("intercept") is not False
    parts = groups.by_key(replies)
    ones = bool(parts) and all(g["ones"] for gs in parts.values() for g in gs)
    out = {}
    k = None
    for key, gs in parts.items():
        state = None
        for g in gs:
            s = _b64_to_bytea8(g["state_no_lead"] if ones and lead else g["state"])
            state = s if state is None else db.one("merge", state, s)["s"]
        data = bytes.fromhex(state[2:])
        _, k, n, _, _ = _HEAD.unpack_from(data)
        rho = struct.unpack_from("=d", data, _HEAD.size + 8 * ((k + 1) * (k + 1) - 1))[0]
        out[key] = {"model": {}, "stats": {"state": base64.b64encode(data).decode()}, "num_rows_processed": n,
                    "num_iterations": 1, "loss": rho * rho / n, "accel_seconds": None}
    kept = lead and not ones
    shared = {"intercept": kept or ones, "num_features": (k or 0) - (1 if kept else 0)}
    return out, {**shared, "_groups": groups, "_replies": replies}


def _logregr(db: Session, sh: _Shards, request: dict, opts: dict, caller_path: str) -> tuple[dict[str, dict], dict]:
    optimizer = STEPPED[opts.get("optimizer", "irls")]
    max_iter = int(opts.get("max_iter", 20))
    tolerance = float(opts.get("tolerance", 0.0001))
    if max_iter < 1 or not tolerance >= 0:
        raise ParameterError("max_iter must be at least 1 and tolerance not negative")
    lead = request["params"].get("intercept") is not False
    call = {"call": secrets.token_hex(16)}  # the shards keep their rows for this call's passes
    request = {**request, "params": {**request["params"], "shard_pass": call}}
    replies = sh.run(request)
    groups = _Groups(replies, sh.p.ngroups)
    parts = groups.by_key(replies)
    ones = bool(parts) and all(g["ones"] for gs in parts.values() for g in gs)
    if lead and ones:
        lead = False  # the features start with ones: no intercept column of ours, the first pass again
        request = {**request, "params": {**request["params"], "intercept": False}}
        replies = sh.run(request)
        parts = groups.by_key(replies)
    state = {key: {"coef": None, "k": 0, "previous": None, "final": False, "cg": None,
                   "n": sum(g["n"] for g in gs)} for key, gs in parts.items()}
    out: dict[str, dict] = {}
    while True:
        steps, finals = [], []
        for key, gs in parts.items():
            st = state[key]
            sums = _sum(gs)
            if st["final"]:
                finals.append((key, {"coef": st["coef"], **sums}))
                continue
            st["k"] += 1
            steps.append((key, {"coef": st["coef"], "cg": st["cg"], **sums}))
        if finals:
            stats = _step(db, request, {"final": True, "groups": [g for _, g in finals]}, caller_path)
            for (key, g), s in zip(finals, stats):
                st = state[key]
                out[key] = {"model": {"coef": st["coef"]}, "stats": s, "num_rows_processed": st["n"],
                            "num_iterations": st["k"], "loss": g["loss"] / st["n"], "accel_seconds": None}
        if steps:
            new = _step(db, request, {"optimizer": optimizer, "groups": [g for _, g in steps]}, caller_path)
            for (key, g), s in zip(steps, new):
                st = state[key]
                st["coef"], st["cg"] = s["coef"], s.get("cg")
                likelihood = -g["loss"]
                if not _finite(st["coef"]):
                    out[key] = {"model": {"coef": st["coef"]}, "stats": {}, "num_rows_processed": st["n"],
                                "num_iterations": st["k"], "loss": float("nan"), "accel_seconds": None}
                    continue  # MADlib's TERMINATED
                if (st["previous"] is not None and abs(likelihood - st["previous"]) < tolerance) or st["k"] >= max_iter:
                    st["final"] = True
                st["previous"] = likelihood
        pending = {key for key in parts if key not in out}
        if not pending:
            break
        last = all(state[key]["final"] for key in pending)
        per_part = []
        for s in range(len(replies)):
            coefs = {num: state[key]["coef"] for num, key in groups.local[s].items() if key in pending}
            per_part.append({**request, "ngroups": sh.p.ngroups,
                             "params": {**request["params"], "shard_pass": {"coefs": coefs, **call, "last": last}}})
        replies = sh.run(request, per_part)
        parts = {key: gs for key, gs in groups.by_key(replies).items() if key in pending}
    k = len(next(iter(state.values()))["coef"] or []) if state else 0
    return out, {"intercept": lead or ones, "num_features": k - (1 if lead else 0), "_groups": groups,
                 "_replies": replies}


def _dsl(db: Session, sh: _Shards, request: dict, caller_path: str) -> tuple[dict[str, dict], dict]:
    """A DSL accumulate algorithm's epochs as one node runs them (engine._train_accumulate): each
    epoch the shards' accumulators at the model, added; the update on this node's server; its
    stopping rule; then the loss pass when the algorithm has one."""
    st = sh.p.dsl
    lead = request["params"].get("intercept") is not False
    shard_pass = {"call": secrets.token_hex(16), "binary": st["binary"]}
    request = {**request, "params": {**request["params"], "shard_pass": shard_pass}}
    replies = sh.run(request)
    groups = _Groups(replies, 0)
    gs = groups.by_key(replies).get("null", [])
    ones = bool(gs) and all(g["ones"] for g in gs)
    if ones and lead:  # the features start with ones: no intercept column of ours, the first pass again
        lead = False
        request["params"] = {**request["params"], "intercept": False}
        replies = sh.run(request)
        gs = groups.by_key(replies).get("null", [])
    if not gs:
        return {}, {"_groups": groups, "_replies": replies}
    n = sum(g["n"] for g in gs)
    w, prev, loss, ep = None, float("inf"), float("nan"), 0
    again = dict(request["params"])
    for ep in range(1, st["epochs"] + 1):
        sums = [_add([g["sums"][k] for g in gs]) for k in range(len(gs[0]["sums"]))]
        if not _finite(sums):  # (JSON has no NaN): the model is not finite, as on one node
            w, loss = [float("nan")] * gs[0]["d"], float("nan")
            break
        new = _step(db, request, {"groups": [{"coef": w, "sums": sums, "modes": gs[0]["modes"], "n": n,
                                               "d": gs[0]["d"]}]}, caller_path)[0]
        w = new["coef"]
        loss = epoch_loss = sum(g["lsum"] for g in gs) / n if new["given"] is None else new["given"]
        if abs(prev - epoch_loss) < st["tolerance"] or ep == st["epochs"] or not _finite(w):
            break
        prev = epoch_loss
        again["shard_pass"] = {**shard_pass, "coefs": {"None": w}}
        gs = groups.by_key(sh.run({**request, "params": again})).get("null", [])
    if st["loss_pass"] and _finite(w):  # the epoch's pass saw the model before the update
        again["shard_pass"] = {**shard_pass, "coefs": {"None": w}, "loss_only": True, "last": True}
        gs = groups.by_key(sh.run({**request, "params": again})).get("null", [])
        loss = sum(g["lsum"] for g in gs) / n
    else:
        sh.run({**request, "params": {**again, "shard_pass": {**shard_pass, "release": True}}})
    model = {"model": {"coef": w}, "stats": {}, "num_rows_processed": n, "num_iterations": ep, "loss": loss,
             "accel_seconds": None}
    return {"null": model}, {"intercept": lead or ones, "num_features": len(w) - (1 if lead else 0),
                             "_groups": groups, "_replies": replies}


def _finite(v: Any) -> bool:
    """Whether every number of ``v`` (a number or nested lists) is finite."""
    if isinstance(v, list):
        return all(_finite(x) for x in v)
    return v is not None and v == v and v not in (float("inf"), float("-inf"))


def _add(parts: list) -> Any:
    """Values (numbers or nested lists of numbers) added elementwise, in their order."""
    if isinstance(parts[0], list):
        return [_add([p[i] for p in parts]) for i in range(len(parts[0]))]
    return sum(parts[1:], parts[0])


def _sum(gs: list[dict]) -> dict:
    """The sums of a group's shard replies, in shard order."""
    return {"grad": _add([g["grad"] for g in gs]), "hess": _add([g["hess"] for g in gs]),
            "loss": _add([g["loss"] for g in gs])}


def _step(db: Session, request: dict, step: dict, caller_path: str, params: dict | None = None) -> list[dict]:
    """This node's server's step (or final statistics) from the merged sums (no data read)."""
    req = {k: v for k, v in request.items() if k in ("algorithm", "dsl_source")}
    req["params"] = {**(params or {}), "shard_step": step}
    raw = db.one("shard_offload", json.dumps(req), None, None, None, caller_path)["r"]
    return server_result(raw)["groups"]


def train(db: Session, p: Plan, request: dict, opts: dict, out: str | None, group_names: list[str] | None,
          caller_path: str) -> tuple[dict, dict | None]:
    """The call over shards: (the reply as one server's, the groups' keys as grouped.offload's)."""
    t0 = time.perf_counter()
    params = {"shard_pass": {}}
    if opts.get("intercept") is False:
        params["intercept"] = False
    if "threads" in opts:
        params["threads"] = opts["threads"]
    req = {k: v for k, v in request.items() if k in ("algorithm", "dsl_source")}
    req["params"] = params
    sh = _Shards(db, p, db.one("ext_version")["extversion"])
    if p.dsl is not None:
        models, shared = _dsl(db, sh, req, caller_path)
    elif request["algorithm"] == "linregr":
        models, shared = _linregr(db, sh, req)
    else:
        models, shared = _logregr(db, sh, req, opts, caller_path)
    groups: _Groups = shared.pop("_groups")
    replies = shared.pop("_replies")
    if not models:
        raise TrainingDataError("no rows to train on (the table is empty or every row has NULLs)")
    seconds = time.perf_counter() - t0
    reply = {**shared, "features_form": groups.features_form, "train_seconds": seconds,
             "path": "shards", "threads": replies[0][0].get("threads"),
             "num_rows_processed": sum(m["num_rows_processed"] for m in models.values()),
             "num_rows_skipped": 0,
             "timings": {"train": seconds, "shards": {"partitions": len(p.foreign) + (1 if p.local_bounds else 0),
                                                     "calls": p.calls, "passes_streamed": p.streamed,
                                                     "bytes_sent": p.bytes_sent,
                                                     "bytes_received": p.bytes_received,
                                                     "shard_paths": sorted(x for x in p.paths if x)}}}
    if group_names is None:
        m = models["null"]
        reply["num_rows_skipped"] = groups.skipped
        reply["groups"] = [{"group": None, **m, "train_seconds": seconds}]
        return reply, None
    order = _ordered(db, out, list(groups.rows), group_names)
    reply["groups"] = [{"group": i + 1, **models[key], "train_seconds": seconds}
                       for i, key in enumerate(order) if key in models]
    named = [json.dumps(dict(zip(group_names, json.loads(key)))) for key in order]
    return reply, {"keys": named, "rows": [groups.rows[key] for key in order]}


def _ordered(db: Session, out: str, keys: list[str], names: list[str]) -> list[str]:
    """The groups' keys in the order one node numbers them: the grouping columns' order, by the
    output table's types (the source's)."""
    cols = ", ".join("(pg_catalog.jsonb_populate_record(NULL::%s, u.o)).%s" % (out, db.quote_ident(n)) for n in names)
    objs = [json.dumps(dict(zip(names, json.loads(k)))) for k in keys]
    rows = db.execute("SELECT u.i FROM pg_catalog.unnest($1::pg_catalog.jsonb[]) WITH ORDINALITY AS u(o, i) "
                      "ORDER BY %s" % cols, ["text[]"], [objs])
    return [keys[r["i"] - 1] for r in rows]


# ---------------------------------------------------------------------------- the shard
@sql_function
def shard_state(plpy: Any, SD: dict, request: str, schema: str, relname: str, columns: list[str]) -> str:
    """A shard's pass for a coordinator (``learnedidx._shard_state``): the statistics of the
    named columns of the table (the label, the features, then ``ngroups`` grouping columns), read
    as the calling role, as JSON {"reply": the server's reply, "keys": the groups or null}."""
    db = Session(plpy, SD, STATEMENTS)
    req = json.loads(request)
    params = req.get("params") if isinstance(req, dict) else None
    dsl_source = req.get("dsl_source") if isinstance(req, dict) else None
    if not isinstance(params, dict) or not isinstance(params.get("shard_pass"), dict) or not (
            req.get("algorithm") in catalog.SHARDED or
            (isinstance(dsl_source, str) and req.get("algorithm") not in catalog.BUILTINS)):
        raise NotSupportedError("a shard computes only the passes of a coordinator: linregr's, logregr's and "
                                "DSL accumulate algorithms'")
    ngroups = req.get("ngroups")
    if not isinstance(ngroups, int) or not 0 <= ngroups < len(columns or []) - 1:
        raise ParameterError("ngroups must count grouping columns among the columns")
    table = db.quote_ident(schema) + "." + db.quote_ident(relname)
    oid = db.one("regclass", table)["oid"]
    _kept_token(db, SD, params["shard_pass"], [oid, list(columns), ngroups])
    req = {"algorithm": req["algorithm"], "params": params, "ngroups": ngroups}
    if dsl_source is not None:
        req["dsl_source"] = dsl_source
    raw, keys = _pass(db, req, oid, table, list(columns), ngroups)
    return json.dumps({"reply": raw, "keys": keys})


def _kept_token(db: Session, SD: dict, shard_pass: dict, what: list) -> None:
    """The token under which this shard's server keeps the rows between the passes of one
    coordinator call (``call``): a secret of this backend's, for this call, transaction, role and
    columns only, so that no other session, snapshot or role uses those rows (a token the
    request brings is ignored)."""
    shard_pass.pop("kept", None)
    call = shard_pass.pop("call", None)
    if not isinstance(call, str):
        return
    now = db.one("xact")
    tokens = SD.setdefault("learnedidx kept", {})
    for key in [k for k in tokens if k[1] != now["t"]]:  # other transactions'
        del tokens[key]
    key = (call, now["t"], now["u"], json.dumps(what))
    shard_pass["kept"] = tokens.setdefault(key, secrets.token_hex(16))  # (128 random bits)
