#!/usr/bin/env python3
"""A scripted HTTP/1.1 server for `tests/e2e/client_test.sh bench-wire`: it answers `mmserve bench`'s KServe
POSTs the way the model name in the path asks, so the bench's own HTTP client (src/cli/bench_http_client.cpp)
meets every framing a server may use, and logs what it received so the test can check the wire bytes.

  bench_wire_server.py PORT_FILE LOG_FILE     (writes the port it listens on to PORT_FILE, then serves)

Models: length (Content-Length, kept alive), chunked (chunks with an extension, a trailer), eof (no length,
Connection: close, the body runs to the close), continue (100 Continue first), http10 (HTTP/1.0, then close),
error (503, kept alive), garbage (a broken status line, then close), hang (never answers), idle (kept alive,
but the server closes a connection idle for 0.15 s). GET /v2/health/ready answers 200.
Each request is logged as a JSON line: {"conn", "model", "head" (Host's port replaced by PORT), "body_bytes",
"body_json"}.
"""
import json
import re
import socket
import sys
import threading

ANSWER = b'{"model_name":"m","outputs":[]}'
log_lock = threading.Lock()


def read_request(conn, buf):
    """Returns (head, body, rest) or None at EOF."""
    while b"\r\n\r\n" not in buf:
        data = conn.recv(65536)
        if not data:
            return None
        buf += data
    head, buf = buf.split(b"\r\n\r\n", 1)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(buf) < length:
        data = conn.recv(65536)
        if not data:
            return None
        buf += data
    return head + b"\r\n\r\n", buf[:length], buf[length:]


def answer(model):
    """(bytes to send, close the connection after)."""
    if model == "chunked":
        body = b"3;x=1\r\n" + ANSWER[:3] + b"\r\n" + (b"%x\r\n" % (len(ANSWER) - 3)) + ANSWER[3:] + b"\r\n"
        return b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body + b"0\r\nX-Trailer: 1\r\n\r\n", False
    if model == "eof":
        return b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + ANSWER, True
    if model == "http10":
        return b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(ANSWER) + ANSWER, True
    if model == "error":
        return b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 2\r\n\r\n{}", False
    if model == "garbage":
        return b"HTTX/1.1 two hundred\r\n\r\n", True
    prefix = b"HTTP/1.1 100 Continue\r\n\r\n" if model == "continue" else b""
    return prefix + b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Type: application/json\r\n\r\n" % len(
        ANSWER) + ANSWER, False


def serve(conn, conn_id, port, log):
    buf = b""
    idle_close = False
    try:
        while True:
            conn.settimeout(0.15 if idle_close else None)
            try:
                got = read_request(conn, buf)
            except socket.timeout:
                return  # the idle close
            if got is None:
                return
            head, body, buf = got
            path = head.split(b" ")[1].decode()
            if path.endswith("/health/ready"):
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                return
            match = re.match(r".*/v2/models/([^/]+)/infer$", path)
            model = match.group(1) if match else "?"
            idle_close = idle_close or model == "idle"
            try:
                body_json = isinstance(json.loads(body), dict)
            except ValueError:
                body_json = False
            text = head.decode("latin-1").replace("127.0.0.1:%d" % port, "127.0.0.1:PORT")
            with log_lock:
                log.write(json.dumps({"conn": conn_id, "model": model, "head": text, "body_bytes": len(body),
                                      "body_json": body_json}) + "\n")
                log.flush()
            if model == "hang":
                continue  # read on; the client times out and closes
            data, close = answer(model)
            conn.sendall(data)
            if close:
                return
    finally:
        conn.close()


def main():
    port_file, log_file = sys.argv[1], sys.argv[2]
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]
    log = open(log_file, "a")
    with open(port_file, "w") as f:
        f.write(str(port))
    n = 0
    while True:
        conn, _ = listener.accept()
        n += 1
        threading.Thread(target=serve, args=(conn, str(n), port, log), daemon=True).start()


if __name__ == "__main__":
    main()
