"""The emulated cloud's state: in memory for speed, written through to SQLite so it survives.

Every change runs inside one event-loop step of the server (no awaits in between), so
concurrent requests never see a half-made change and need no locks.
"""

import json
import sqlite3
from pathlib import Path

from spotpool.emulator.instances import InstanceRecord

_SCHEMA = """
CREATE TABLE IF NOT EXISTS instances (id TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS client_tokens (
    region TEXT NOT NULL, token TEXT NOT NULL, ids TEXT NOT NULL, PRIMARY KEY (region, token));
CREATE TABLE IF NOT EXISTS capacity (
    zone TEXT NOT NULL, instance_type TEXT NOT NULL, available INTEGER NOT NULL,
    PRIMARY KEY (zone, instance_type));
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS tag_pairs (
    account TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
    PRIMARY KEY (account, key, value));
"""


class CloudStore:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self.instances: dict[str, InstanceRecord] = {
            row[0]: InstanceRecord.model_validate_json(row[1])
            for row in self._db.execute("SELECT id, body FROM instances")
        }
        self._tokens: dict[tuple[str, str], list[str]] = {
            (region, token): json.loads(ids)
            for region, token, ids in self._db.execute(
                "SELECT region, token, ids FROM client_tokens"
            )
        }
        self.capacity: dict[tuple[str, str], int] = {
            (zone, kind): available
            for zone, kind, available in self._db.execute(
                "SELECT zone, instance_type, available FROM capacity"
            )
        }

        # Tag key/value pairs made with CreateTag(s), bound to no resource (tag_pairs.py).
        self.tag_pairs: set[tuple[str, str, str]] = {
            (account, key, value)
            for account, key, value in self._db.execute("SELECT account, key, value FROM tag_pairs")
        }

    def close(self) -> None:
        self._db.close()

    def save(self, *records: InstanceRecord) -> None:
        for record in records:
            self.instances[record.instance_id] = record
        with self._db:
            self._db.executemany(
                "INSERT OR REPLACE INTO instances (id, body) VALUES (?, ?)",
                [(r.instance_id, r.model_dump_json()) for r in records],
            )

    def created_for(self, region: str, token: str) -> list[str] | None:
        return self._tokens.get((region, token))

    def remember_token(self, region: str, token: str, ids: list[str]) -> None:
        self._tokens[(region, token)] = ids
        self._db.execute(
            "INSERT OR REPLACE INTO client_tokens (region, token, ids) VALUES (?, ?, ?)",
            (region, token, json.dumps(ids)),
        )

    def set_capacity(self, zone: str, instance_type: str, available: int | None) -> None:
        """Spot stock for one zone and type; None means unlimited again."""
        if available is None:
            self.capacity.pop((zone, instance_type), None)
            self._db.execute(
                "DELETE FROM capacity WHERE zone = ? AND instance_type = ?", (zone, instance_type)
            )
            return
        self.capacity[(zone, instance_type)] = available
        self._db.execute(
            "INSERT OR REPLACE INTO capacity (zone, instance_type, available) VALUES (?, ?, ?)",
            (zone, instance_type, available),
        )

    def next_number(self, name: str) -> int:
        """A counter that survives restarts (IP addresses are never handed out twice)."""
        self._db.execute(
            "INSERT INTO counters (name, value) VALUES (?, 1) "
            "ON CONFLICT(name) DO UPDATE SET value = value + 1",
            (name,),
        )
        row = self._db.execute("SELECT value FROM counters WHERE name = ?", (name,)).fetchone()
        return int(row[0])

    def add_tag_pair(self, account: str, key: str, value: str) -> None:
        self.tag_pairs.add((account, key, value))
        self._db.execute(
            "INSERT OR IGNORE INTO tag_pairs (account, key, value) VALUES (?, ?, ?)",
            (account, key, value),
        )

    def remove_tag_pair(self, account: str, key: str, value: str) -> None:
        self.tag_pairs.discard((account, key, value))
        self._db.execute(
            "DELETE FROM tag_pairs WHERE account = ? AND key = ? AND value = ?",
            (account, key, value),
        )
