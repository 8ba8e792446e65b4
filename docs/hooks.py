"""mkdocs hook: the pages link to the repository's own files (scripts, reports, figures) by relative links that also
work on a code host (`../benchmark/results/...`). mkdocs sees only docs/, so this hook adds every other file of the
repository to the site under its own path: a report under benchmark/ renders as a page, any other file (a figure, a
script, README.md) is copied as it is. `mkdocs build --strict` then fails on a link to a file that does not exist,
inside docs/ or out of it."""

import os

from mkdocs.structure.files import File, InclusionLevel

SKIP = {"docs", "site", "build", "runs", "videos", "wandb", "__pycache__"}  # and every hidden folder
PAGES = ("benchmark/",)  # Markdown outside docs/ rendered as pages: the reports and the benchmark README


class _Copied(File):
    """A Markdown file outside benchmark/ (README.md: its links are a code host's, into docs/) is copied, not built."""

    def is_documentation_page(self):
        return False


def on_files(files, config):
    docs = config["docs_dir"]
    root = os.path.dirname(os.path.abspath(docs))
    for folder, subdirs, names in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d not in SKIP and not d.startswith(".") and "egg-info" not in d)
        for name in names:
            path = os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")
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
