#!/usr/bin/env python3
"""Writes the hand-made seed inputs of every fuzz target into fuzz/corpus/<target>/.

Seeds are valid and near-valid inputs that show the fuzzer each parser's
shapes; campaigns add what they find. Run from anywhere; existing files with
the same name are overwritten, others are left alone.
"""
import base64, hashlib, hmac, os, struct, glob

ROOT = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(ROOT, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


# ---------------------------------------------------------------- HTTP request heads
REQUESTS = {
    "get": "GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
    "get-10": "GET /index.html HTTP/1.0\r\n\r\n",
    "get-10-keepalive": "GET / HTTP/1.0\r\nConnection: keep-alive\r\nHost: a\r\n\r\n",
    "post-length": "POST /form HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
    "post-chunked": "POST /up HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "absolute": "GET http://Example.COM:8080/a/b?x=1&y HTTP/1.1\r\nHost: other\r\n\r\n",
    "absolute-https-noslash": "GET HTTPS://h?q=1 HTTP/1.1\r\nHost: h\r\n\r\n",
    "options-star": "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
    "connect": "CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
    "upgrade": "GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: x\r\n\r\n",
    "expect": "PUT /f HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n",
    "expect-other": "PUT /f HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\n\r\n",
    "dup-length-same": "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",
    "dup-length-diff": "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
    "length-and-chunked": "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
    "te-gzip-chunked": "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
    "te-10": "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
    "dup-host": "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    "no-host": "GET / HTTP/1.1\r\nAccept: */*\r\n\r\n",
    "bare-lf": "GET / HTTP/1.1\nHost: a\n\n",
    "obs-fold": "GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n",
    "space-before-colon": "GET / HTTP/1.1\r\nHost : a\r\n\r\n",
    "http2-version": "GET / HTTP/2.0\r\nHost: a\r\n\r\n",
    "length-huge": "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n",
    "length-sign": "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n",
    "connection-tokens": "GET / HTTP/1.1\r\nHost: a\r\nConnection: close, x-foo, keep-alive\r\nX-Foo: 1\r\nTE: trailers\r\n\r\n",
    "connection-names-te": "POST / HTTP/1.1\r\nHost: a\r\nConnection: transfer-encoding\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "xff": "GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 1.2.3.4\r\nX-Forwarded-Proto: https\r\nForwarded: for=x\r\n\r\n",
    "partial": "GET /partial HTTP/1.1\r\nHost: a\r\n",
    "pipelined": "GET /1 HTTP/1.1\r\nHost: a\r\n\r\nGET /2 HTTP/1.1\r\nHost: a\r\n\r\n",
    "many-headers": "GET / HTTP/1.1\r\nHost: a\r\n" + "".join(f"X-{i}: {i}\r\n" for i in range(101)) + "\r\n",
}
for name, req in REQUESTS.items():
    write("request_head", name, req)

# ---------------------------------------------------------------- chunked bodies
CHUNKED = {
    "empty": "0\r\n\r\n",
    "hello": "5\r\nhello\r\n0\r\n\r\n",
    "two": "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    "ext": "5;name=value;x\r\nhello\r\n0;last\r\n\r\n",
    "trailer": "A\r\n0123456789\r\n0\r\nTrailer: x\r\nOther: y\r\n\r\n",
    "leading-zeros": "00000003\r\nabc\r\n0\r\n\r\n",
    "upper-hex": "1F\r\n" + "x" * 31 + "\r\n0\r\n\r\n",
    "then-next": "3\r\nabc\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n",
    "incomplete": "10\r\nabc",
    "bare-lf": "5\nhello\r\n0\r\n\r\n",
    "missing-crlf": "5\r\nhelloXX0\r\n\r\n",
    "too-large": "11111111111111111\r\n",
    "max-digits": "ffffffffffffffff\r\nabc",
    "bad-trailer": "0\r\nbad\x00trailer\r\n\r\n",
    "ext-lf": "5;a\nb\r\n",
    "space": "5 \r\nhello\r\n0\r\n\r\n",
    "negative": "-1\r\n",
}
for name, body in CHUNKED.items():
    write("chunked_body", name, body)

# ---------------------------------------------------------------- response heads
RESPONSES = {
    "ok-length": "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
    "chunked": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
    "chunked-and-length": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 10\r\n\r\n",
    "te-gzip": "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
    "te-gzip-chunked": "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
    "until-close": "HTTP/1.0 200 OK\r\nServer: x\r\n\r\n",
    "no-content": "HTTP/1.1 204 No Content\r\n\r\n",
    "not-modified": "HTTP/1.1 304 Not Modified\r\nContent-Length: 100\r\n\r\n",
    "switching": "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
    "continue": "HTTP/1.1 100 Continue\r\n\r\n",
    "no-reason": "HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n",
    "empty-reason": "HTTP/1.1 404 \r\nContent-Length: 0\r\n\r\n",
    "long-reason": "HTTP/1.1 500 Internal Server Error Really\r\nConnection: close\r\n\r\n",
    "bare-lf": "HTTP/1.1 200 OK\nContent-Length: 0\n\n",
    "mixed-lf": "HTTP/1.1 200 OK\nX-A: b\r\nContent-Length: 0\r\n\r\n",
    "conflicting-length": "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    "status-999": "HTTP/1.1 999 Odd\r\n\r\n",
    "status-099": "HTTP/1.1 099 Low\r\n\r\n",
    "connection-tokens": "HTTP/1.1 200 OK\r\nConnection: keep-alive, x-hop\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nContent-Length: 0\r\n\r\n",
    "set-cookie": "HTTP/1.1 200 OK\r\nSet-Cookie: JSESSIONID=abc; Path=/\r\nContent-Length: 0\r\n\r\n",
    "partial": "HTTP/1.1 200 OK\r\nContent-Len",
    "obs-text-reason": "HTTP/1.1 200 \xc3\xa9t\xc3\xa9\r\nContent-Length: 0\r\n\r\n",
}
for name, res in RESPONSES.items():
    write("response_head", name, res.encode("latin-1") if "\xc3" in res else res)

# ---------------------------------------------------------------- PROXY protocol
SIG = b"\r\n\r\n\x00\r\nQUIT\n"


def v2(cmd, fam, payload):
    return SIG + bytes([0x20 | cmd, fam]) + struct.pack(">H", len(payload)) + payload


def tlv(kind, value):
    return bytes([kind]) + struct.pack(">H", len(value)) + value


inet = bytes([192, 0, 2, 1, 198, 51, 100, 7]) + struct.pack(">HH", 56324, 443)
inet6 = bytes(15) + b"\x01" + bytes(10) + b"\xff\xff" + bytes([10, 0, 0, 1]) + struct.pack(">HH", 1, 65535)
PROXY = {
    "v1-tcp4": b"PROXY TCP4 192.0.2.1 198.51.100.7 56324 443\r\nGET / HTTP/1.1\r\n",
    "v1-tcp6": b"PROXY TCP6 2001:db8::1 ::ffff:10.0.0.1 1 65535\r\n",
    "v1-unknown": b"PROXY UNKNOWN\r\n",
    "v1-unknown-junk": b"PROXY UNKNOWN ffff::1 1.2.3.4 whatever\r\n",
    "v1-max": b"PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n",
    "v1-partial": b"PROXY TCP4 192.0.2.1 198.5",
    "v1-leading-zero": b"PROXY TCP4 192.0.2.1 198.51.100.7 0443 443\r\n",
    "v1-two-spaces": b"PROXY TCP4  192.0.2.1 198.51.100.7 1 2\r\n",
    "v1-bare-cr": b"PROXY TCP4 1.2.3.4\r5.6.7.8 1 2\r\n",
    "v2-inet": v2(1, 0x11, inet) + b"payload",
    "v2-inet-udp": v2(1, 0x12, inet),
    "v2-inet6": v2(1, 0x21, inet6),
    "v2-inet-tlvs": v2(1, 0x11, inet + tlv(1, b"h2") + tlv(2, b"example.com") + tlv(4, b"\0\0\0") + tlv(0x20, b"\x01\0\0\0\0" + tlv(0x21, b"TLSv1.3"))),
    "v2-crc": v2(1, 0x11, inet + tlv(3, b"\0\0\0\0")),
    "v2-unix": v2(1, 0x31, b"/tmp/a".ljust(108, b"\0") + b"/tmp/b".ljust(108, b"\0")),
    "v2-unspec": v2(1, 0x00, b""),
    "v2-local": v2(0, 0x00, b""),
    "v2-local-junk": v2(0, 0x99, b"ignored"),
    "v2-short-addr": v2(1, 0x21, inet),
    "v2-bad-tlv": v2(1, 0x11, inet + b"\x01\x00\x09ab"),
    "v2-partial": v2(1, 0x11, inet)[:20],
    "v2-bad-version": SIG + b"\x31\x11\x00\x0c" + inet,
    "v2-too-long": SIG + b"\x21\x11\xff\xff",
}
for name, data in PROXY.items():
    write("proxy_protocol", name, data)

# ---------------------------------------------------------------- TLS ClientHello


def vec(n, data):
    return len(data).to_bytes(n, "big") + data


def ext(kind, data):
    return struct.pack(">H", kind) + vec(2, data)


def hello(sni=None, alpn=None, versions=None, extra=b"", legacy=0x0303):
    exts = b""
    if sni is not None:
        exts += ext(0, vec(2, b"\x00" + vec(2, sni)))
    if alpn is not None:
        exts += ext(16, vec(2, b"".join(vec(1, p) for p in alpn)))
    if versions is not None:
        exts += ext(43, vec(1, b"".join(struct.pack(">H", v) for v in versions)))
    exts += extra
    body = struct.pack(">H", legacy) + bytes(range(32)) + vec(1, bytes(32)) + vec(2, b"\x13\x01\x13\x02\xc0\x2f") + vec(1, b"\x00") + vec(2, exts)
    return b"\x01" + len(body).to_bytes(3, "big") + body


def records(message, sizes=None, version=b"\x03\x01"):
    out, i = b"", 0
    sizes = sizes or [len(message)]
    for s in sizes:
        part = message[i:i + s]
        i += s
        out += b"\x16" + version + vec(2, part)
    return out


h = hello(b"www.example.com", [b"h2", b"http/1.1"], [0x0304, 0x0303])
HELLOS = {
    "full": records(h),
    "no-sni": records(hello(None, [b"h2"])),
    "upper-sni": records(hello(b"WWW.Example.COM")),
    "ip-sni": records(hello(b"192.0.2.1")),
    "trailing-dot": records(hello(b"example.com.")),
    "tls12": records(hello(b"a.b", None, None, legacy=0x0303), version=b"\x03\x03"),
    "fragmented": records(h, [10, 40, len(h) - 50]),
    "byte-records": records(h[:8], [1] * 8),
    "partial": records(h)[:60],
    "dup-ext": records(hello(b"a.example", extra=ext(0, vec(2, b"\x00" + vec(2, b"b.example"))))),
    "grease": records(hello(b"g.example", extra=ext(0x0a0a, b"") + ext(0xfe0d, b"\x00" * 40))),
    "long-label": records(hello(b"a" * 64 + b".com")),
    "http": b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
    "sslv2": b"\x80\x2e\x01\x00\x02\x00\x15\x00\x00\x00\x10",
    "alert": b"\x15\x03\x03\x00\x02\x02\x28",
    "bad-length": b"\x16\x03\x01\x00\x05\x01\x00\xff\xff\xff",
}
for name, data in HELLOS.items():
    write("client_hello", name, data)

# ---------------------------------------------------------------- RDP


def rdp(user_data, code=0xE0):
    li = 6 + len(user_data)
    tpdu = bytes([li, code, 0, 0, 0, 0, 0]) + user_data
    return bytes([3, 0]) + struct.pack(">H", 4 + len(tpdu)) + tpdu


RDP = {
    "cookie": rdp(b"Cookie: mstshash=alice\r\n\x01\x00\x08\x00\x03\x00\x00\x00"),
    "cookie-spaces": rdp(b"Cookie: mstshash=  bob \r\n"),
    "cookie-empty": rdp(b"Cookie: mstshash=\r\n"),
    "no-cookie": rdp(b"\x01\x00\x08\x00\x03\x00\x00\x00"),
    "token": rdp(b"Cookie: msts=3640205228.15629.0000\r\n"),
    "no-crlf": rdp(b"Cookie: mstshash=carol"),
    "not-cr": rdp(b"Cookie: mstshash=x\r\n", code=0xD0),
    "partial": rdp(b"Cookie: mstshash=alice\r\n")[:10],
    "bad-version": b"\x04\x00\x00\x13\x0e\xe0",
    "too-long": b"\x03\x00\x08\x00",
    "tls": records(hello(b"rdp.example")),
}
for name, data in RDP.items():
    write("rdp_cookie", name, data)

# ---------------------------------------------------------------- configuration
for path in sorted(glob.glob(os.path.join(ROOT, "..", "examples", "*.toml"))):
    with open(path, "rb") as f:
        write("config", "example-" + os.path.basename(path), f.read())
CONFIGS = {
    "empty": "",
    "minimal": '[[service]]\nname = "a"\nlisten = "127.0.0.1:80"\npool = "p"\n[[pool]]\nname = "p"\nservers = [{ address = "127.0.0.1:81" }]\n',
    "errors": '[[service]]\nname = 1\nlisten = "nowhere"\npool = "missing"\nbogus = true\n[[pool]]\nname = "p"\nservers = []\n',
    "bad-toml": '[[service]\nname = "a',
    "tls-files": '[[service]]\nname = "a"\nmode = "https"\nlisten = "127.0.0.1:443"\npool = "p"\ntls = { certificate = "/dev/stdin", key = "/dev/zero" }\n[[pool]]\nname = "p"\nservers = [{ address = "127.0.0.1:81" }]\n',
    "l4": '[[service]]\nname = "t"\nmode = "tcp"\nlisten = "127.0.0.1:3389"\npool = "p"\n[[pool]]\nname = "p"\npersistence = { rdp_cookie = true, capacity = 10 }\nservers = [{ address = "127.0.0.1:3390" }]\n',
    "rules-bad-regex": '[[service]]\nname = "a"\nlisten = "127.0.0.1:80"\npool = "p"\nrules = [{ path_regex = "(", pool = "p" }, { header = { name = "x y" }, deny = true }]\n[[pool]]\nname = "p"\nservers = [{ address = "127.0.0.1:81" }]\n',
    "unicode": '# \u00e9\u4e2d\n[[service]]\nname = "\u00e9"\nlisten = "[::1]:80"\npool = "p"\n[[pool]]\nname = "p"\nservers = [{ address = "[::1]:81", weight = 0 }]\n',
}
for name, text in CONFIGS.items():
    write("config", name + ".toml", text)

# ---------------------------------------------------------------- persistence cookies
KEY = bytes([7]) * 32


def token(pool, server):
    mac = hmac.new(KEY, pool.encode() + b"\x00" + server.encode(), hashlib.sha256).digest()[:12]
    return base64.urlsafe_b64encode(mac).decode().rstrip("=")


ta, tb = token("insert", "a"), token("insert", "b")
COOKIES = {
    "token-a": f"SRV={ta}",
    "token-b-among": f"theme=dark; SRV={tb}; lang=en",
    "token-quoted": f'SRV="{ta}"',
    "token-spaces": f"  SRV = {tb} ;",
    "two-tokens": f"SRV=forged; SRV={tb}; SRV={ta}",
    "forged": "SRV=AAAAAAAAAAAAAAAAAAAAAA",
    "learn": "JSESSIONID=abc123",
    "learn-empty-then": "JSESSIONID=; JSESSIONID=xyz",
    "learn-set": "JSESSIONID=old\xffJSESSIONID=new; Path=/; HttpOnly",
    "learn-delete": "JSESSIONID=old\xffJSESSIONID=; Max-Age=0",
    "learn-delete-negative": "JSESSIONID=old\xffJSESSIONID=x; max-age=-1",
    "learn-quoted": 'JSESSIONID="q"\xffJSESSIONID="q2"; Secure',
    "long": "JSESSIONID=" + "v" * 129,
    "no-equals": "SRV; JSESSIONID",
    "empty": "",
}
for name, text in COOKIES.items():
    write("persistence_cookie", name, text.encode("latin-1"))

# ---------------------------------------------------------------- rules (flags byte + request head)
RULES = {
    "png": (0, "GET /a/logo.png HTTP/1.1\r\nHost: Static.Example.COM:80\r\n\r\n"),
    "org-edits": (8 | 16, "GET / HTTP/1.1\r\nHost: www.example.org\r\nX-Drop: 1\r\nX-Org: 0\r\nX-Forwarded-For: 1.1.1.1\r\n\r\n"),
    "api": (32, "HEAD /v1/users HTTP/1.1\r\nHost: api.example.com\r\n\r\n"),
    "api-post": (0, "POST /v1/users HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 2\r\n\r\n{}"),
    "test-regex": (0, "GET / HTTP/1.1\r\nHost: abc.test\r\n\r\n"),
    "admin-inside": (0, "GET /admin HTTP/1.1\r\nHost: a\r\n\r\n"),
    "admin-v6": (2, "GET /admin HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n"),
    "admin-outside": (1, "GET /admin/x HTTP/1.1\r\nHost: a\r\n\r\n"),
    "old": (0, "GET /old/page?x HTTP/1.1\r\nHost: a\r\n\r\n"),
    "tenant": (0, "GET / HTTP/1.1\r\nHost: a\r\nX-Tenant: blue\r\n\r\n"),
    "upgrade": (0, "GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n\r\n"),
    "prefix-suffix": (0, "GET / HTTP/1.1\r\nHost: a\r\nX-Prefix: abc\r\nX-Suffix: xyz\r\n\r\n"),
    "debug": (1, "GET /?debug HTTP/1.1\r\nHost: a\r\n\r\n"),
    "lang": (0, "GET /p?lang=fr&a=12&b=34 HTTP/1.1\r\nHost: a\r\n\r\n"),
    "upload": (64 | 4, "POST /upload HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"),
    "secure": (4, "GET /secure HTTP/1.1\r\nHost: a\r\nX-Client-Verify: SUCCESS\r\n\r\n"),
    "absolute": (0, "GET http://API.example.com/v1/x HTTP/1.1\r\nHost: other\r\n\r\n"),
    "absolute-query": (0, "GET http://h?debug HTTP/1.1\r\nHost: h\r\n\r\n"),
    "http10": (8, "GET /old/x HTTP/1.0\r\n\r\n"),
    "hop-by-hop": (16, "POST / HTTP/1.1\r\nHost: a\r\nConnection: x-a, te\r\nX-A: 1\r\nTE: trailers\r\nKeep-Alive: 1\r\nProxy-Connection: x\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx"),
}
for name, (flags, head) in RULES.items():
    write("rules", name, bytes([flags]) + head.encode())

# ---------------------------------------------------------------- cache fields (length + field lines)
# Two bytes of representation length, then lines: each one a field value for every cache
# field parser, and (first four bytes) a piece at (offset, size) of the representation.
CACHE = {
    "ranges": (1000, ["bytes=0-99", "bytes=-100, 500-", "bytes 0-99/1000", "bytes=9-1"]),
    "directives": (100, ["max-age=60, s-maxage=30, stale-while-revalidate=5", "no-store", "max-age=\"60\", private"]),
    "dates": (10, ["Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"]),
    "validators": (64, ['"v1"', 'W/"v1"', "*", "Sun, 06 Nov 1994 08:49:37 GMT"]),
    "targeted": (5, ["max-age=60, public", "Max-Age=60", "no-store;x=1"]),
}
for name, (length, lines) in CACHE.items():
    write("cache_fields", name, length.to_bytes(2, "big") + "\n".join(lines).encode())
# Pieces that join into the whole: offsets 0, 600 and 300 of 1000 bytes, sizes 400, 400, 401.
pieces = [(0, 399), (600, 399), (300, 400)]
write("cache_fields", "pieces", (1000).to_bytes(2, "big") + b"\n".join(o.to_bytes(2, "big") + s.to_bytes(2, "big") + b"\0" for o, s in pieces))

# ---------------------------------------------------------------- HTTP/2 (frames, HPACK)
def frame(kind, flags, stream, payload=b""):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


DATA, HEADERS, PRIORITY, RST, SETTINGS, PUSH, PING, GOAWAY, WINDOW, CONT = 0, 1, 2, 3, 4, 5, 6, 7, 8, 9
END_STREAM, END_HEADERS = 0x1, 0x4
# :method GET, :scheme http, :path /, :authority example.com (indexed into the table).
GET = bytes([0x82, 0x86, 0x84, 0x41, 11]) + b"example.com"
POST = bytes([0x83, 0x86, 0x84, 0x41, 11]) + b"example.com" + bytes([0x5C, 1]) + b"4"  # content-length: 4
# The first byte: 1 puts the client preface first.
HTTP2_SERVER = {
    "get": frame(SETTINGS, 0, 0) + frame(HEADERS, END_HEADERS | END_STREAM, 1, GET),
    "post": frame(SETTINGS, 0, 0, b"\x00\x04\x00\x01\x00\x00") + frame(HEADERS, END_HEADERS, 1, POST) + frame(DATA, END_STREAM, 1, b"body"),
    "continuation": frame(SETTINGS, 0, 0) + frame(HEADERS, END_STREAM, 1, GET[:3]) + frame(CONT, END_HEADERS, 1, GET[3:]),
    "trailers": frame(SETTINGS, 0, 0) + frame(HEADERS, END_HEADERS, 1, GET) + frame(DATA, 0, 1, b"x") + frame(HEADERS, END_HEADERS | END_STREAM, 1, bytes([0x40, 2]) + b"x-" + bytes([1]) + b"1"),
    "control": frame(SETTINGS, 0, 0) + frame(PING, 0, 0, b"12345678") + frame(WINDOW, 0, 0, b"\x00\x01\x00\x00") + frame(SETTINGS, 1, 0) + frame(PRIORITY, 0, 3, b"\x00\x00\x00\x01\x10"),
    # The first request puts :authority in the dynamic table (62), the others index it.
    "streams": frame(SETTINGS, 0, 0) + frame(HEADERS, END_HEADERS | END_STREAM, 1, GET) + b"".join(frame(HEADERS, END_HEADERS, i, bytes([0x82, 0x86, 0x84, 0xBE])) for i in (3, 5)) + frame(RST, 0, 3, b"\x00\x00\x00\x08"),
    "goaway": frame(SETTINGS, 0, 0) + frame(HEADERS, END_HEADERS | END_STREAM, 1, GET) + frame(GOAWAY, 0, 0, b"\x00\x00\x00\x01\x00\x00\x00\x00"),
    "padded": frame(SETTINGS, 0, 0) + frame(HEADERS, END_HEADERS | 0x8, 1, b"\x02" + GET + b"\x00\x00") + frame(DATA, END_STREAM | 0x8, 1, b"\x01ab\x00"),
}
for name, data in HTTP2_SERVER.items():
    write("http2_server", name, b"\x01" + data)
# :status 200, then content-length: 5; 103 as a literal :status.
OK = bytes([0x88, 0x5C, 1]) + b"5"
# The first byte: bits 0-1 open 1-4 requests, bit 2 gives them a body, bit 3 puts an
# empty SETTINGS first.
HTTP2_CLIENT = {
    "ok": (8, frame(HEADERS, END_HEADERS, 1, OK) + frame(DATA, END_STREAM, 1, b"hello")),
    "interim": (8, frame(HEADERS, END_HEADERS, 1, bytes([0x48, 3]) + b"103") + frame(HEADERS, END_HEADERS | END_STREAM, 1, bytes([0x89]))),
    "trailers": (9, frame(HEADERS, END_HEADERS, 1, bytes([0x88])) + frame(DATA, 0, 1, b"ab") + frame(HEADERS, END_HEADERS | END_STREAM, 1, bytes([0x40, 11]) + b"grpc-status" + bytes([1]) + b"0")),
    "reset-and-goaway": (11, frame(HEADERS, END_HEADERS | END_STREAM, 1, bytes([0x88])) + frame(RST, 0, 3, b"\x00\x00\x00\x07") + frame(GOAWAY, 0, 0, b"\x00\x00\x00\x05\x00\x00\x00\x00")),
    "settings-ping-window": (12, frame(SETTINGS, 0, 0, b"\x00\x03\x00\x00\x00\x01\x00\x04\x00\x00\x00\x10") + frame(PING, 0, 0, b"abcdefgh") + frame(WINDOW, 0, 1, b"\x00\x00\x10\x00") + frame(SETTINGS, 1, 0)),
    "push": (8, frame(PUSH, END_HEADERS, 1, b"\x00\x00\x00\x02" + GET)),
    "continuation": (8, frame(HEADERS, 0, 1, OK[:1]) + frame(CONT, END_HEADERS, 1, OK[1:]) + frame(DATA, END_STREAM, 1, b"hello")),
}
for name, (flags, data) in HTTP2_CLIENT.items():
    write("http2_client", name, bytes([flags]) + data)
# HPACK: blocks after a length byte (its top bit asks the re-encoding for Huffman).
HPACK = {
    "get": GET,
    "huffman": bytes.fromhex("828684418cf1e3c2e5f23a6ba0ab90f4ff"),  # RFC 7541 C.4.1
    "literals": bytes([0x40, 10]) + b"custom-key" + bytes([12]) + b"custom-value" + bytes([0x10, 8]) + b"password" + bytes([6]) + b"secret",
    "size-update": bytes([0x3F, 0xE1, 0x1F, 0x82, 0x20, 0x84]),
    "indexed-dynamic": bytes([0x40, 1]) + b"a" + bytes([1]) + b"b" + bytes([0xBE]),
}
for name, block in HPACK.items():
    write("hpack", name, bytes([len(block) | 0x80]) + block + bytes([len(block)]) + block)
