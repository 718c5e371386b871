"""textstats: count the lines and words of a text file."""

import argparse
import sys


def count(text):
    return {
        "lines": len(text.splitlines()),
        "words": len(text.split()),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(prog="textstats", description="Count the lines and words of a UTF-8 text file.")
    parser.add_argument("path", help="the file to count")
    parser.add_argument("--lines", action="store_true", help="print the number of lines")
    parser.add_argument("--words", action="store_true", help="print the number of words")
    args = parser.parse_args(argv)
    with open(args.path, encoding="utf-8") as f:
        stats = count(f.read())
    wanted = [name for name in ("lines", "words") if getattr(args, name)] or ["lines", "words"]
    for name in wanted:
        print(f"{name}: {stats[name]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
