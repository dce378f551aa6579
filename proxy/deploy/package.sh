#!/usr/bin/env bash
# The Debian package of tollgate: target/debian/tollgate_VERSION_ARCH.deb, holding
#   /usr/bin/tollgate                            the binary, its debug info stripped
#   /lib/systemd/system/tollgate.service         tollgate.service, ExecStart at /usr/bin/tollgate
#   /usr/share/tollgate/examples/*.toml          the example configs
#   /usr/share/tollgate/grafana-dashboard.json   the dashboard
#   /usr/share/tollgate/alerts.yml, alerts.test.yml   the alert rules and their unit test
#   /usr/share/doc/tollgate/copyright
# No maintainer scripts: installing it starts and enables nothing (write
# /etc/tollgate/tollgate.toml, check it, then `systemctl enable --now tollgate`).
#
#   bash proxy/deploy/package.sh [BINARY]
#
# BINARY defaults to target/release/tollgate, built here first. Built with dpkg-deb alone, not
# cargo-deb: installing cargo-deb took longer than CI can spare (see the commit that added this).
# Prints the package's path last.
set -euo pipefail
cd "$(dirname "$0")/../.."

binary=${1:-}
if [ -z "$binary" ]; then
  cargo build --release --locked -p tollgate --bin tollgate
  binary=target/release/tollgate
fi
# "tollgate 0.1.0 (commit abc1234)": the version is the binary's own.
version=$("$binary" --version | awk '{print $2}')
arch=$(dpkg --print-architecture)
deploy=proxy/deploy

root=$(mktemp -d)
chmod 0755 "$root"
trap 'rm -rf "$root"' EXIT
install -d -m 0755 "$root/DEBIAN" "$root/usr/bin" "$root/lib/systemd/system" \
  "$root/usr/share/tollgate/examples" "$root/usr/share/doc/tollgate"
install -m 0755 "$binary" "$root/usr/bin/tollgate"
strip --strip-debug "$root/usr/bin/tollgate"
sed 's|/usr/local/bin/tollgate|/usr/bin/tollgate|g' "$deploy/tollgate.service" \
  > "$root/lib/systemd/system/tollgate.service"
chmod 0644 "$root/lib/systemd/system/tollgate.service"
install -m 0644 "$deploy"/examples/*.toml "$root/usr/share/tollgate/examples/"
install -m 0644 "$deploy/grafana-dashboard.json" "$deploy/alerts.yml" "$deploy/alerts.test.yml" \
  "$root/usr/share/tollgate/"
cat > "$root/usr/share/doc/tollgate/copyright" <<'COPYRIGHT'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: tollgate

Files: *
License: MIT or Apache-2.0
COPYRIGHT
chmod 0644 "$root/usr/share/doc/tollgate/copyright"

# The newest glibc symbol version the binary asks for, as the libc6 it needs.
glibc=$(objdump -T "$root/usr/bin/tollgate" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' \
  | sort -V | tail -1)
cat > "$root/DEBIAN/control" <<CONTROL
Package: tollgate
Version: $version
Architecture: $arch
Maintainer: Tollgate developers <tollgate@example.invalid>
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Depends: libc6 (>= $glibc), libgcc-s1
Suggests: nftables
Section: net
Priority: optional
Description: TCP/UDP proxy that enforces per-source rate limits in fixed memory
 Tollgate tracks millions of IPv4/IPv6 sources in a Count-Min sketch whose memory is
 fixed at start and whose error it states, and throttles the ones over their limits.
 With a systemd unit, example configs, a Grafana dashboard and Prometheus alerts.
CONTROL

mkdir -p target/debian
package="target/debian/tollgate_${version}_${arch}.deb"
dpkg-deb --root-owner-group --build "$root" "$package" >/dev/null
echo "$package"
