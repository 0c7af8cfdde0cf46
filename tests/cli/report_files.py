"""The files `vwt compare` and `vwt info --svg` write are well-formed for the programs that read
them: both SVGs parse as XML, report.md is valid UTF-8 and report.json is JSON.
Usage: report_files.py VWT DATA WORK"""
import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

vwt, data, work = sys.argv[1:4]
shutil.rmtree(work, ignore_errors=True)
subprocess.run([vwt, "compare", "--data", data, "--preset", "tiny_l6", "--seeds", "1", "--steps", "2", "--batch", "2",
                "--seq", "16", "--eval-every", "1", "--sample-tokens", "40", "--prompt", "Caf\u00e9 \u20ac ><",
                "--out", work], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
subprocess.run([vwt, "info", "--preset", "tiny_l8", "--svg", os.path.join(work, "info.svg")], check=True,
               stdout=subprocess.DEVNULL)
for name in ("val_loss.svg", "schedules.svg", "info.svg"):
    try:
        ET.parse(os.path.join(work, name))
    except ET.ParseError as e:
        sys.exit(f"{name} is not well-formed XML: {e}")
with open(os.path.join(work, "report.md"), "rb") as f:
    try:
        f.read().decode("utf-8", errors="strict")
    except UnicodeDecodeError as e:
        sys.exit(f"report.md is not valid UTF-8: {e}")
with open(os.path.join(work, "report.json")) as f:
    json.load(f)
print("report files well-formed")
