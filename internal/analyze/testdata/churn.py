#!/usr/bin/env python3
"""Opens N short TCP connections to its own listener on 127.0.0.1:PORT, each
sending a few bytes, then N more from one client port (PORT+1, outside the ephemeral range, bound with
SO_REUSEADDR and closed with linger 0, so no TIME_WAIT holds it): the kernel
reuses socket memory for the next connection, and in the second half the
4-tuple repeats too. Usage: churn.py N PORT"""
import socket
import struct
import sys
import threading

n, port = int(sys.argv[1]), int(sys.argv[2])
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(('127.0.0.1', port))
srv.listen(1024)


def serve():
    while True:
        c, _ = srv.accept()
        try:
            while c.recv(4096):
                pass
        except ConnectionResetError:  # a linger-0 close
            pass
        c.close()


threading.Thread(target=serve, daemon=True).start()
for reuse in (False, True):
    for i in range(n):
        s = socket.socket()
        if reuse:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
            s.bind(('127.0.0.1', port + 1))
        s.connect(('127.0.0.1', port))
        s.sendall(b'hello %d\n' % i)
        s.close()
print('made', 2 * n, 'connections', file=sys.stderr)
