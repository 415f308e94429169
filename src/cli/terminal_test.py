"""Runs `spillway train` on a pseudo-terminal: the redrawn progress line fits
the terminal's width, and Ctrl-C (SIGINT) ends the line with a newline before
the process dies of SIGINT (exit status 130 in a shell).

Usage: terminal_test.py SPILLWAY_BINARY
"""

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time

TRAIN = ["train", "--model", "resnet18", "--image", "32", "--base-width", "4", "--batch", "2",
         "--classes", "4", "--policy", "none", "--budget", "1GiB", "--steps", "1000000",
         "--threads", "1"]


def read_until(master, proc, pattern, seconds):
    """Reads the terminal until `pattern` shows up, the process ends or time runs out."""
    data = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the other side closed
                break
            if not chunk:
                break
            data += chunk
            if pattern is not None and re.search(pattern, data):
                return data
        elif proc.poll() is not None and pattern is not None:
            break
    return data


def run(binary, columns):
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = dict(os.environ)
    env.pop("COLUMNS", None)
    proc = subprocess.Popen([binary] + TRAIN, stdin=slave, stdout=slave, stderr=slave, env=env,
                            start_new_session=True)
    os.close(slave)
    failures = []
    try:
        # Three steps drawn: the progress line is open.
        data = read_until(master, proc, rb"step 3/", 120)
        if b"step 3/" not in data:
            proc.kill()
            return [f"{columns} columns: no third step within 120 s: {data[-2000:]!r}"]
        proc.send_signal(signal.SIGINT)
        data += read_until(master, proc, None, 2)
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    text = data.decode(errors="replace")
    if code != -signal.SIGINT:
        failures.append(f"{columns} columns: exit {code}, not killed by SIGINT (want -2): "
                        f"{text[-500:]!r}")
    # The output after the last redraw: the line, then the newline Ctrl-C wrote.
    if not re.search(r"step \d+/\d+[^\n]*\x1b\[K\r?\n$", text):
        failures.append(f"{columns} columns: the output does not end the progress line with a "
                        f"newline: {text[-300:]!r}")
    for line in re.findall(r"\r(step [^\r\n\x1b]*)\x1b\[K", text):
        if len(line) > columns - 1:
            failures.append(f"{columns} columns: a progress line of {len(line)} characters: "
                            f"{line!r}")
    return failures


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    failures = []
    for columns in (80, 40):
        failures += run(sys.argv[1], columns)
    for failure in failures:
        print("FAILED:", failure)
    if not failures:
        print("terminal_test: progress lines fit 80 and 40 columns; Ctrl-C ends the line and "
              "exits by SIGINT")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
