"""Parameters of the emulated FPGA (defaults: SIA's published design)."""
from __future__ import annotations

import json
import tomllib
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from learnedidx import checks
from learnedidx.errors import ConfigError


@dataclass(frozen=True)
class DeviceConfig:
    units: int = 4  #: QR units
    pus_per_unit: int = 2  #: processing units per QR unit (row blocks factored in parallel)
    inner_pes: int = 3  #: inner-loop PEs applying a reflector to columns in parallel
    dot_width: int = 8  #: inputs of the dot-product tree
    max_features: int = 32  #: widest key (features) the datapath holds
    clock_mhz: float = 250.0
    link_gbps: float = 8.0  #: host↔device bytes per ns (GB/s), PCIe gen3 x8-like
    link_latency_us: float = 2.0
    lat_add: int = 4  #: FP32 adder pipeline depth (cycles)
    lat_mul: int = 3
    lat_sqrt: int = 12
    lat_recip: int = 12
    precision: str = "fp32"  #: fp32 (the hardware) or fp64

    def __post_init__(self) -> None:
        for f in ("units", "pus_per_unit", "inner_pes", "dot_width", "max_features"):
            checks.integer(f"device {f}", getattr(self, f), 1)
        for f in ("clock_mhz", "link_gbps"):
            checks.number(f"device {f}", getattr(self, f), 0, above=True)
        checks.choice("device precision", self.precision, ("fp32", "fp64"))

    @classmethod
    def load(cls, path: str | Path | None = None, **overrides) -> "DeviceConfig":
        """From a TOML or JSON file (keys as the field names), then keyword overrides."""
        data: dict = {}
        if path is not None:
            p = Path(path)
            try:
                data = tomllib.loads(p.read_text()) if p.suffix == ".toml" else json.loads(p.read_text())
            except (OSError, ValueError) as exc:
                raise ConfigError(f"cannot read device config {p}: {exc}") from None
        data.update({k: v for k, v in overrides.items() if v is not None})
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"unknown device parameters: {sorted(unknown)}")
        return cls(**data)

    @classmethod
    def parse_settings(cls, items: list[str] | tuple[str, ...]) -> dict:
        """``["units=8", "precision=fp64"]`` (command-line ``--set``) as typed overrides."""
        defaults = cls().to_dict()
        out: dict = {}
        for item in items:
            name, sep, raw = item.partition("=")
            name = name.strip()
            if not sep or name not in defaults:
                raise ConfigError(f"bad device setting {item!r}: expected NAME=VALUE, NAME one of {sorted(defaults)}")
            try:
                out[name] = type(defaults[name])(raw.strip())
            except ValueError:
                raise ConfigError(f"bad value for device setting {name}: {raw!r}") from None
        return out

    def to_dict(self) -> dict:
        return asdict(self)
