"""A stand-in for an S3 store on 127.0.0.1 that records every request reaching it (method, path,
the key id it was signed with) and answers each with an ETag: what the fencing S3 proxy's tests
check nothing reaches."""

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Store(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str]] = []  # method, path, key id it was signed by
        super().__init__(("127.0.0.1", 0), StoreHandler)


class StoreHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Store

    def do_GET(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        signer = (self.headers.get("Authorization") or "").partition("Credential=")[2]
        self.server.requests.append((self.command, self.path, signer.split("/")[0]))
        data = b"" if self.command in ("PUT", "HEAD") else b"stored"
        self.send_response(200)
        self.send_header("ETag", '"e1"')
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_PUT = do_POST = do_DELETE = do_HEAD = do_GET

    def log_message(self, format: str, *args: object) -> None:
        pass
