#!/usr/bin/env python3
"""TCP goodput between the two namespace nodes (a tiny iperf): run the server in the receiving
namespace, the client in the sending one; the client prints {"goodput_bps": ...}.
    ip netns exec ampnode2 tcp_goodput.py server 10.213.7.2 PORT BYTES &
    ip netns exec ampnode1 tcp_goodput.py client 10.213.7.2 PORT BYTES"""
import json
import socket
import sys
import time

mode, host, port, nbytes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if mode == "server":
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port))
    s.listen(1)
    s.settimeout(60)
    c, _ = s.accept()
    got = 0
    while got < nbytes:
        b = c.recv(1 << 20)
        if not b:
            break
        got += len(b)
    c.sendall(b"k")
    c.close()
else:
    for _ in range(100):  # the server may still be starting
        try:
            c = socket.create_connection((host, port), timeout=60)
            break
        except OSError:
            time.sleep(0.05)
    buf = b"x" * (1 << 20)
    t = time.time()
    sent = 0
    while sent < nbytes:
        c.sendall(buf)
        sent += len(buf)
    c.recv(1)
    dt = time.time() - t
    print(json.dumps({"bytes": sent, "seconds": dt, "goodput_bps": sent * 8 / dt}))
