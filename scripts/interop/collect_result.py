"""Serves chromium_echo.html on 127.0.0.1:18999 and prints the one result it POSTs back."""
import http.server
import os
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
result = {}
class H(http.server.SimpleHTTPRequestHandler):
    def do_POST(self):
        result["body"] = self.rfile.read(int(self.headers["Content-Length"])).decode()
        self.send_response(204); self.end_headers()
        threading.Thread(target=srv.shutdown).start()
    def log_message(self, *a): pass
srv = http.server.ThreadingHTTPServer(("127.0.0.1", 18999), lambda *a: H(*a, directory=HERE))
srv.serve_forever()
print(result.get("body"))
