#!/usr/bin/env bash
# Builds kube-apiserver from Debian's `kubernetes` source package (there is no
# container engine, kind or k3s on these machines, and Debian ships only kubectl)
# and caches it under ~/.cache/trialflow/kube/<source version>/, so a machine
# pays the ~5 minute build once. Recipe and the reasons for each step:
# ../shared/notes/kubernetes-test-cluster.md.
# Prints the directory that holds kube-apiserver on its last line.
set -euo pipefail

cache_root="${TRIALFLOW_KUBE_CACHE:-$HOME/.cache/trialflow/kube}"

apt_install() {
  local policy=/usr/sbin/policy-rc.d had_policy=0
  [ -e "$policy" ] && had_policy=1
  [ "$had_policy" = 1 ] || { printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod +x "$policy"; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  [ "$had_policy" = 1 ] || rm -f "$policy"
}

# Source lines (deb-src) mirroring the binary ones, once.
src_list=/etc/apt/sources.list.d/trialflow-src.sources
if ! apt-cache showsrc kubernetes >/dev/null 2>&1 || ! apt-cache showsrc kubernetes | grep -q '^Package:'; then
  sed -e 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources > "$src_list"
  apt-get update -qq
fi
version="$(apt-cache showsrc kubernetes | sed -n 's/^Version: //p' | head -1)"
out="$cache_root/$version"
if [ -x "$out/kube-apiserver" ]; then
  command -v etcd >/dev/null 2>&1 || { apt-get update -qq; apt_install etcd-server; }
  echo "$out"
  exit 0
fi

command -v go >/dev/null 2>&1 && command -v etcd >/dev/null 2>&1 \
  && command -v dpkg-source >/dev/null 2>&1 \
  && [ -d /usr/share/gocode/src/github.com/modern-go/reflect2 ] \
  || { apt-get update -qq; apt_install golang-go etcd-server dpkg-dev golang-github-modern-go-reflect2-dev openssl; }

work="$(mktemp -d "${TMPDIR:-/tmp}/trialflow-kube-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$work"
apt-get source -qq kubernetes >/dev/null 2>&1
src="$(find "$work" -maxdepth 1 -mindepth 1 -type d -name 'kubernetes-*' | head -1)"

export GOPATH="$work/gopath" GO111MODULE=off CGO_ENABLED=0 GOPROXY=off
export GOCACHE="$work/gocache" GOFLAGS=  # 1.3 GB, needed only while building
mkdir -p "$GOPATH/src/k8s.io"
ln -s "$src" "$GOPATH/src/k8s.io/kubernetes"
cd "$GOPATH/src/k8s.io/kubernetes"

# The vendored reflect2 1.0.1 faults under Go >= 1.18: use Debian's 1.0.2.
rm -rf vendor/github.com/modern-go/reflect2
cp -r /usr/share/gocode/src/github.com/modern-go/reflect2 vendor/github.com/modern-go/reflect2
rm -f vendor/github.com/modern-go/reflect2/go.mod

# The generated OpenAPI definitions are not in the tarball.
go build -o "$work/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen
pkgs="$(grep -rl --include='*.go' '+k8s:openapi-gen=' pkg cmd plugin staging/src/k8s.io vendor/k8s.io 2>/dev/null \
  | grep -v -e code-generator -e sample-apiserver -e '_test.go$' \
  | xargs -n1 dirname | sort -u \
  | sed -e 's#^staging/src/#k8s.io/kubernetes/vendor/#' -e 's#^vendor/#k8s.io/kubernetes/vendor/#' \
        -e 's#^\(pkg\|cmd\|plugin\)/#k8s.io/kubernetes/\1/#' | sort -u | paste -sd, -)"
"$work/openapi-gen" --input-dirs "$pkgs" \
  --output-package k8s.io/kubernetes/pkg/generated/openapi \
  -O zz_generated.openapi \
  --go-header-file vendor/k8s.io/code-generator/hack/boilerplate.go.txt \
  --output-base "$GOPATH/src" >/dev/null 2>"$work/openapi-gen.log" || { cat "$work/openapi-gen.log" >&2; exit 1; }

go build -o "$work/kube-apiserver" \
  -ldflags "-s -w -X k8s.io/kubernetes/vendor/k8s.io/component-base/version.gitVersion=v1.20.2 -X k8s.io/kubernetes/vendor/k8s.io/component-base/version.gitMajor=1 -X k8s.io/kubernetes/vendor/k8s.io/component-base/version.gitMinor=20" \
  ./cmd/kube-apiserver
mkdir -p "$out"
mv "$work/kube-apiserver" "$out/kube-apiserver"
echo "$out"
