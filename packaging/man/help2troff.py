#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
# Prints the .SS section of packaging/man/pipewright-cli.1 for each subcommand named, from that subcommand's
# --help (CLI11's layout), as a first draft to paste into the page and edit: the page is maintained by hand, and
# tests/packaging/test_man_pages.cpp fails while a subcommand or option of --help has no entry there.
#   packaging/man/help2troff.py build/dev/app/pipewright-cli run "history list"
import re
import subprocess
import sys


def esc(text):
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return re.sub(r"`([^`]*)`", r"\\fB\1\\fR", text)


def sentence(text):
    text = esc(text[:1].upper() + text[1:])
    if text and not text.endswith("."):
        text += "."
    return text


def parse(help_text):
    """The first line, the usage line, the positionals and the options of a CLI11 help text."""
    lines = help_text.split("\n")
    usage = next(line for line in lines if line.startswith("Usage: "))[len("Usage: "):]
    section, entries = None, {"Options": [], "Positionals": []}
    for line in lines[1:]:
        if line.startswith("Exit status"):
            break
        if line and not line.startswith(" "):
            section = line.rstrip(":")
            continue
        if section not in entries or not line.strip():
            continue
        if line.startswith(" " * 30) and entries[section]:  # a description continued on its own line
            entries[section][-1][1] = (entries[section][-1][1] + " " + line.strip()).strip()
            continue
        match = re.match(r"^  (\S.*?)(?:\s{2,}(.*))?$", line)
        entries[section].append([match.group(1), match.group(2) or ""])
    return lines[0], usage, entries["Positionals"], entries["Options"]


def option_entry(spec, description):
    names, _, arg = spec.partition(" ")
    required = "REQUIRED" in arg
    arg = arg.replace("REQUIRED", "").strip()
    default = re.search(r"=(\S+)$", arg)
    kind = arg.split(":")[0].split("=")[0].strip()
    repeated = kind.endswith(" ...")
    kind = kind.removesuffix(" ...")
    tag = ", ".join("\\fB" + esc(n) + "\\fR" for n in names.split(","))
    if kind:
        tag += " \\fI" + kind + "\\fR" + (" ..." if repeated else "")
    text = sentence(description)
    if required:
        text += " Required."
    if default and "(default" not in description:
        text += " Default: " + esc(default.group(1)) + "."
    return [".TP", tag, text]


def section(cli, path):
    help_text = subprocess.run([cli, *path.split(), "--help"], capture_output=True, text=True, check=True).stdout
    title, usage, positionals, options = parse(help_text)
    out = ['.SS "%s"' % path, "\\fB" + esc(usage) + "\\fR", ".br", sentence(title)]
    for spec, description in positionals:
        out += [".TP", "\\fI" + spec.split(" ")[0] + "\\fR", sentence(description)]
    for spec, description in options:
        if not spec.startswith("-h,--help"):
            out += option_entry(spec, description)
    return "\n".join(out)


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: help2troff.py PIPEWRIGHT_CLI SUBCOMMAND...")
    print("\n".join(section(sys.argv[1], path) for path in sys.argv[2:]))
