"""mkdocs hook: the pages link to the repository's own files (scripts, reports, figures) by relative links that also
work on a code host (`../benchmark/results/...`). mkdocs sees only docs/, so this hook adds the repository's other
files to the site under their own paths: a report under benchmark/ renders as a page, any other file (a figure, a
script, README.md) is copied as it is. Only the files git tracks are added (`git ls-files`), so that what a local run
leaves in the tree (runs/, MUJOCO_LOG.TXT, a scratch report) never enters the site; outside a git checkout (an
archive of the repository) every file is. `mkdocs build --strict` then fails on a link to a file that does not exist,
or that git does not track, inside docs/ or out of it."""

import os
import subprocess

from mkdocs.structure.files import File, InclusionLevel

SKIP = {"docs", "site", "build", "runs", "videos", "wandb", "__pycache__"}  # and every hidden folder
PAGES = ("benchmark/",)  # Markdown outside docs/ rendered as pages: the reports and the benchmark README


class _Copied(File):
    """A Markdown file outside benchmark/ (README.md: its links are a code host's, into docs/) is copied, not built."""

    def is_documentation_page(self):
        return False


def _skipped(folder):
    return folder in SKIP or folder.startswith(".") or "egg-info" in folder


def site_files(root):
    """The paths (relative, with /) of the files outside docs/ that the site holds: those git tracks that are in the
    tree, or every file outside a git checkout; none in a SKIP, hidden or egg-info folder."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
        paths = [p for p in listed.decode().split("\0") if p and os.path.isfile(os.path.join(root, p))]
    except (OSError, subprocess.CalledProcessError):  # no git, or not a checkout
        paths = []
        for folder, subdirs, names in os.walk(root):
            subdirs[:] = [d for d in subdirs if not _skipped(d)]
            paths += [os.path.relpath(os.path.join(folder, n), root).replace(os.sep, "/") for n in names]
    return sorted(p for p in paths if not any(_skipped(d) for d in p.split("/")[:-1]))


def on_files(files, config):
    docs = config["docs_dir"]
    root = os.path.dirname(os.path.abspath(docs))
    for path in site_files(root):
        page = path.endswith(".md") and path.startswith(PAGES)
        # src_uri is the path as a page in docs/ names it, so that mkdocs resolves ../benchmark/... to it
        files.append(
            (File if page or not path.endswith(".md") else _Copied)(
                "../" + path,
                docs,
                config["site_dir"],
                config["use_directory_urls"],
                dest_uri=_dest(path, config["use_directory_urls"]) if page else path,
                inclusion=InclusionLevel.NOT_IN_NAV,
            )
        )
    return files


def _dest(path, directory_urls):
    stem = path[:-3]
    if os.path.basename(stem) in ("README", "index"):
        return f"{os.path.dirname(stem)}/index.html"
    return f"{stem}/index.html" if directory_urls else f"{stem}.html"
