"""A local user's fake submit agent, run as that user by tests/condor/test_channel.py.

    python3 squatter.py SOCKET LOG ANSWER

Serves HTTP on the UNIX socket SOCKET (mode 0666), answers every request
with ANSWER, and appends the first bytes of each request it gets to LOG, so
the test can tell whether a hook sent it another user's job ad.
"""

import http.server
import os
import socketserver
import sys

path, log, answer = sys.argv[1], sys.argv[2], sys.argv[3].encode()


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with open(log, "ab") as fh:
            fh.write(body[:200] + b"\n")
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args) -> None:
        pass

    def address_string(self) -> str:
        return "local"


# Listening and 0666 before the socket takes its name: the test acts (chowns it to root) once it sees the name.
server = socketserver.UnixStreamServer(path + ".new", Handler)
os.chmod(path + ".new", 0o666)
os.rename(path + ".new", path)
server.serve_forever()
