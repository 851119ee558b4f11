#!/usr/bin/env bash
# Installs the Debian packages the test suite needs when they are missing:
# openjdk-17-jre-headless (ZooKeeper and Spark run on it), zookeeper (run directly with java) and
# postgresql (the PostgreSQL sink's tests start their own server with initdb/pg_ctl), and Node.js
# with npm (the interop tests drive pulsar-flex, a JavaScript Pulsar client, from tests/interop),
# chromium with chromium-driver (tests/console drive the web console in headless chromium).
set -euo pipefail
missing=()
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
[ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "missing Debian packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "installing Debian packages: ${missing[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
