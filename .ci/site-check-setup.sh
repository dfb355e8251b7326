#!/usr/bin/env bash
# Installs what `make site-check` needs outside Python: Debian's headless Chromium and its chromedriver.
# Idempotent: a machine that already has both only gets their versions printed. Needs root (or sudo) for apt-get.
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  SUDO="sudo"
fi

missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)

if [ "${#missing[@]}" -gt 0 ]; then
  if [ -n "$SUDO" ] && ! command -v sudo >/dev/null; then
    echo "site-check-setup: ${missing[*]} missing and neither root nor sudo: apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "site-check-setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "site-check-setup: chromium and chromium-driver already installed"
fi

# Debian's /usr/bin/chromium is a shell launcher that sources /etc/chromium.d/*; its stderr noise is not ours.
echo "site-check-setup: $(/usr/bin/chromium --version 2>/dev/null)"
echo "site-check-setup: $(/usr/bin/chromedriver --version 2>/dev/null)"
