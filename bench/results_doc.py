"""Writes a generated section into docs/results.md, between its markers."""
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results.md"


def write_section(begin, end, section, heading):
    """Replaces the text between `begin` and `end` (markers included in
    `section`), or appends `section` under `heading` if the markers are absent."""
    text = RESULTS.read_text()
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        text = head + section + tail
    else:
        text = text.rstrip("\n") + f"\n\n## {heading}\n\n" + section + "\n"
    RESULTS.write_text(text)
    print(f"updated {RESULTS.relative_to(ROOT)}")
