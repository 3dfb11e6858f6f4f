#!/usr/bin/env bash
# Installs what the build needs that cargo cannot fetch: protoc (Lance's
# build compiles protobuf definitions). Safe to run repeatedly.
set -euo pipefail
if ! command -v protoc >/dev/null 2>&1; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq protobuf-compiler >/dev/null
fi
