"""A headless Chromium driven over the DevTools protocol (CDP), for the dashboard tests."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

from testkit.nodes import wait_until
from testkit.processes import stop_process

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-extensions", "--remote-allow-origins=*", "--remote-debugging-port=0"]


def chromium_binary() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One Chromium process showing ``url``; ``evaluate()`` runs JavaScript in the page."""

    def __init__(self, url: str, profile: Path, timeout: float = 20.0):
        import websocket  # websocket-client from PyPI

        self.log = profile / "chromium.log"
        profile.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([chromium_binary(), *FLAGS, f"--user-data-dir={profile}", url],
                                         stdout=log, stderr=subprocess.STDOUT)
        try:
            port_file = profile / "DevToolsActivePort"
            port = wait_until(lambda: port_file.exists() and port_file.read_text().split("\n")[0], timeout=timeout,
                              what=f"Chromium's DevTools port (log: {self.log})")
            page = wait_until(lambda: self._page(int(port)), timeout=timeout, what="Chromium's page target")
            self._ws = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=timeout)
        except BaseException:
            self.close()
            raise
        self._ids = itertools.count(1)

    @staticmethod
    def _page(port: int) -> dict[str, Any] | None:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as answer:
            targets = json.loads(answer.read())
        return next((t for t in targets if t.get("type") == "page"), None)

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self._ids)
        self._ws.send(json.dumps({"id": ident, "method": method, "params": params}))
        while True:  # skip events until our answer arrives
            message = json.loads(self._ws.recv())
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"CDP {method}: {message['error']}")
                return message["result"]

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path, width: int = 1280, height: int = 900) -> Path:
        """A PNG of the page as it is now, ``width`` x ``height`` CSS pixels."""
        import base64

        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=False)
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))
        return path

    def close(self) -> None:
        ws = getattr(self, "_ws", None)
        if ws is not None:
            ws.close()
        stop_process(self.proc, timeout=10)
