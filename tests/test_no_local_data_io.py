"""No Python file I/O on data paths: data lives on any filesystem Spark reaches.

Events, outputs, state and commit records go through Spark's readers and writers and
``windowing.storage.lake.Lake`` (Hadoop's API). Python's ``os``/``pathlib``/``shutil``/``fcntl``
file operations are allowed only where the path is local by design: the pipeline YAML
(``config/loading.py``), the pipelines folder and the Dagster home (``orchestration/``), the
sample-history generator (``sample.py``, which writes local test and demo data), the
embedded Derby metastore's folder (``metastore.py``), a kernel task's spill folder
(``chunks.py``: the executor's own local folder, ``SPARK_LOCAL_DIRS``, as Spark's shuffle),
the driver JVM's archive of Spark's classes (``runner/jvm_classes.py``: the driver's cache
folder, beside the java binary and pyspark's jars it is made for), and the driver's own
small files on a local folder (``storage/local_files.py``: ``Lake`` calls it only for a
path its ``_local`` finds on the driver's disk).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILE_IO = re.compile(
    r"\bos\.(path\.(exists|isdir|isfile|getsize)|listdir|walk|makedirs|mkdir|remove|rename|replace|unlink|scandir|stat)"
    r"|\bshutil\.|\bfcntl\b|\bopen\(|\bPath\(|\.glob\(|\.iterdir\(|\.read_text\(|\.write_text\(|\.mkdir\("
    r"|\.exists\(\)|\.is_dir\(\)|\.is_file\(\)|\bpq\.(read|write)|ParquetFile\("
)
#: Calls that look like file I/O but are not Python's: Hadoop's FileSystem (``fs.open``)
#: and ``Lake`` (over Hadoop), and Dagster's code references to local source files (the
#: call, or its ``file_path`` argument on a line of its own).
NOT_PYTHON_IO = (
    "hadoop.fs.Path",
    "jvm.",
    "fs.open(",
    'ParquetFileReader").open(',
    "lake.read_text(",
    "LocalFileCodeReference(",
    "file_path=str(Path(",
)
LOCAL_BY_DESIGN = {
    "windowing/config/loading.py",
    "windowing/sample.py",
    "orchestration/demo.py",
    "orchestration/definitions.py",
    "windowing/metastore.py",
    "windowing/runner/chunks.py",
    "windowing/runner/jvm_classes.py",
    "windowing/storage/local_files.py",
}


def test_engine_and_assets_do_no_python_file_io_on_data_paths():
    found = []
    for folder in ("windowing", "assets", "orchestration"):
        for f in sorted((ROOT / folder).rglob("*.py")):
            rel = str(f.relative_to(ROOT))
            if rel in LOCAL_BY_DESIGN:
                continue
            for n, line in enumerate(f.read_text().splitlines(), 1):
                code = line.split("#", 1)[0]
                if FILE_IO.search(code) and not any(ok in code for ok in NOT_PYTHON_IO):
                    found.append(f"{rel}:{n}: {line.strip()}")
    assert not found, "Python file I/O on a data path:\n" + "\n".join(found)


def test_the_local_files_module_is_reached_only_for_a_path_on_the_drivers_disk():
    """Every call of ``local_files`` in ``Lake`` is under ``local = self._local(...)`` and
    ``if local is not None``: a path Hadoop would write elsewhere never reaches it."""
    lines = (ROOT / "windowing" / "storage" / "lake.py").read_text().splitlines()
    calls = [n for n, line in enumerate(lines) if re.search(r"\blocal_files\.\w+\(", line)]
    assert calls, "Lake no longer writes local files itself: drop this test and local_files.py's exemption"
    for n in calls:
        assert "(local" in lines[n] and lines[n - 1].strip() == "if local is not None:", lines[n]
        assert lines[n - 2].strip().startswith("local = self._local("), lines[n - 2]
