# l7-setup.sh: the bench's L7 setup for the on-demand scripts (callgrind-l7.sh,
# paired-h2.sh), sourced: one worker or thread, a `.png` rule to a second pool, keep-alive
# and reuse both ways, X-Forwarded-For and X-Forwarded-Proto, both pools on one origin.

# l7_switchyard_toml LISTEN ORIGIN POOL_PROTOCOL [SERVICE_LINES]: switchyard's
# configuration on stdout. POOL_PROTOCOL is a pool line (`protocol = "h2"`) or empty;
# SERVICE_LINES more lines of the service (its TLS, its cache), or none.
l7_switchyard_toml() {
    local listen=$1 origin=$2 pool_protocol=$3 service_lines=${4:-}
    cat <<EOF
workers = 1

[[service]]
name = "web"
listen = ["$listen"]
$service_lines
pool = "main"
rules = [{ path_suffix = ".png", pool = "images" }]

[[pool]]
name = "main"
$pool_protocol
servers = [{ address = "$origin" }]

[[pool]]
name = "images"
$pool_protocol
servers = [{ address = "$origin" }]
EOF
}

# l7_haproxy_cfg LISTEN ORIGIN BIND_OPTIONS SERVER_OPTIONS: HAProxy's configuration on
# stdout (`proto h2` as BIND_OPTIONS for h2c clients, as SERVER_OPTIONS for h2c servers).
l7_haproxy_cfg() {
    local listen=$1 origin=$2 bind_options=$3 server_options=$4
    cat <<EOF
global
    nbthread 1
    maxconn 9000
defaults
    mode http
    option http-keep-alive
    option forwardfor
    http-reuse always
    timeout http-request 10s
    timeout http-keep-alive 60s
    timeout connect 3s
    timeout client 60s
    timeout server 30s
frontend web
    bind $listen $bind_options
    http-request set-header X-Forwarded-Proto http
    use_backend images if { path_end .png }
    default_backend main
backend main
    server a $origin $server_options
backend images
    server c $origin $server_options
EOF
}
