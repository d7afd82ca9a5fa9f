#!/usr/bin/env python3
# Copyright fencegate authors.
"""Holds half-sent gRPC messages open against a gateway; reports its memory.

Each of --connections HTTP/2 connections starts a Write whose gRPC length
prefix announces --message_bytes, sends --sent_bytes of it as fast as the
gateway's flow control allows, and then stops sending, keeping the stream
open. Meanwhile the gateway's VmRSS (from /proc/PID/status) is sampled every
second for --hold_s seconds, and the peak is printed, with how many streams
and connections the gateway reset or closed. docs/benchmarks.md reports it.

Needs python3-h2 (Debian: apt-get install python3-h2).
"""

import argparse
import selectors
import socket
import sys
import time

try:
    import h2.config
    import h2.connection
    import h2.events
    import h2.exceptions
except ImportError:
    sys.exit("half_sent.py needs python3-h2: apt-get install python3-h2")


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return -1.0


class HalfSent:
    """One connection with one stream that never finishes its message."""

    def __init__(self, host, port, message_bytes, sent_bytes):
        self.sock = socket.create_connection((host, port))
        self.sock.setblocking(False)
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True))
        self.conn.initiate_connection()
        self.stream = self.conn.get_next_available_stream_id()
        self.conn.send_headers(self.stream, [
            (":method", "POST"), (":scheme", "http"),
            (":path", "/fencegate.v1.Gateway/Write"),
            (":authority", f"{host}:{port}"),
            ("content-type", "application/grpc"), ("te", "trailers")])
        self.pending = (b"\x00" + message_bytes.to_bytes(4, "big"))
        self.left = sent_bytes
        self.closed = False
        self.reset = False
        self.flush()

    def pump(self):
        """Sends what flow control allows."""
        while self.left > 0 and not self.closed:
            window = self.conn.local_flow_control_window(self.stream)
            size = min(window, self.conn.max_outbound_frame_size,
                       self.left + len(self.pending))
            if size <= 0:
                break
            chunk = self.pending + b"x" * (size - len(self.pending))
            self.pending = b""
            self.left -= len(chunk)
            try:
                self.conn.send_data(self.stream, chunk)
            except h2.exceptions.H2Error:
                self.reset = True
                break
        self.flush()

    def flush(self):
        data = self.conn.data_to_send()
        while data and not self.closed:
            try:
                n = self.sock.send(data)
                data = data[n:]
            except BlockingIOError:
                time.sleep(0.001)
            except OSError:
                self.closed = True

    def read(self):
        try:
            data = self.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.closed = True
            return
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError:
            self.closed = True
            return
        for event in events:
            if isinstance(event, (h2.events.StreamReset,
                                  h2.events.StreamEnded)):
                self.reset = True
            if isinstance(event, h2.events.ConnectionTerminated):
                self.closed = True
        self.pump()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addr", default="127.0.0.1:7070")
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--message_bytes", type=int, default=16 << 20)
    parser.add_argument("--sent_bytes", type=int, default=(16 << 20) - 1024)
    parser.add_argument("--hold_s", type=int, default=30)
    args = parser.parse_args()
    host, port = args.addr.rsplit(":", 1)
    before = rss_mib(args.pid)
    selector = selectors.DefaultSelector()
    clients = []
    for _ in range(args.connections):
        c = HalfSent(host, int(port), args.message_bytes, args.sent_bytes)
        selector.register(c.sock, selectors.EVENT_READ, c)
        clients.append(c)
    peak = before
    deadline = time.time() + args.hold_s
    next_sample = time.time()
    while time.time() < deadline:
        for key, _ in selector.select(timeout=0.05):
            key.data.read()
        for c in clients:
            c.pump()
        if time.time() >= next_sample:
            peak = max(peak, rss_mib(args.pid))
            next_sample += 1
    sent = sum(args.sent_bytes - max(c.left, 0) for c in clients)
    print(f"connections={args.connections} announced_mib="
          f"{args.message_bytes / 2**20:.0f} sent_mib_total={sent / 2**20:.0f} "
          f"rss_before_mib={before:.0f} rss_peak_mib={peak:.0f} "
          f"rss_end_mib={rss_mib(args.pid):.0f} "
          f"streams_reset={sum(c.reset for c in clients)} "
          f"connections_closed={sum(c.closed for c in clients)}")


if __name__ == "__main__":
    main()
