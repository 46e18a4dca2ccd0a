"""``sql`` names the columns of a query alike in every form it prints."""

from __future__ import annotations

import csv
import io

from tests.cli.conftest import Seeded, run

QUERY = "SELECT 1 AS id, 2 AS id, 3 AS id_2, 4 AS id"


def test_the_csv_header_has_the_json_keys(seeded: Seeded) -> None:
    """A name two columns share was repeated in the CSV header (``id,id,id_2,id``), where
    the JSON renames the later ones (``id_3``, ``id_4``): a reader keying rows by the header
    (``csv.DictReader``) lost the first ``id`` and read the last as the only one."""
    keys = list(run("--db", seeded.db, "sql", QUERY, "--json").json()[0])
    got = run("--db", seeded.db, "sql", QUERY, "--csv")
    assert got.code == 0, got.err
    assert list(csv.reader(io.StringIO(got.out))) == [keys, ["1", "2", "3", "4"]]
    (row,) = csv.DictReader(io.StringIO(got.out))
    assert row == dict(zip(keys, ["1", "2", "3", "4"], strict=True))


def test_the_table_header_has_the_json_keys(seeded: Seeded) -> None:
    keys = list(run("--db", seeded.db, "sql", QUERY, "--json").json()[0])
    got = run("--db", seeded.db, "sql", QUERY)
    assert got.code == 0, got.err
    assert got.out.splitlines()[0].split() == keys == ["id", "id_3", "id_2", "id_4"]
