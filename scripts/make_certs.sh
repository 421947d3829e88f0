#!/usr/bin/env bash
# Development certificates and SuperNode key pairs for a Flower 1.42 deployment.
#
#   scripts/make_certs.sh [options] OUT_DIR
#
# Writes into OUT_DIR:
#   ca.key, ca.crt            a self-signed certificate authority (ECDSA P-384); ca.key is
#                             removed at the end with --discard-ca-key
#   server.key, server.pem    the SuperLink's TLS certificate, signed by the CA, with a
#                             subjectAltName that covers 127.0.0.1 and localhost (default)
#   node-<i>, node-<i>.pub    SuperNode authentication key pairs, i = 0..N-1: ECDSA P-384,
#                             private key in OpenSSH format, public key in OpenSSH format,
#                             as `flower-supernode --auth-supernode-private-key` and
#                             `flwr supernode register` expect in Flower 1.42
#
# Options:
#   --nodes N        SuperNode key pairs node-0 .. node-(N-1)   (default 0)
#   --key NAME       one more key pair named NAME (repeatable)
#   --san LIST       subjectAltName of the server certificate
#                    (default "IP:127.0.0.1,DNS:localhost"; for another machine add its
#                    address, e.g. "IP:127.0.0.1,DNS:localhost,IP:10.0.0.5,DNS:link.lan")
#   --days D         validity of the certificates in days (default 365)
#   --force          replace files that exist (default: keep them, so reruns are cheap)
#   --discard-ca-key remove ca.key once the server certificate is issued: nobody can sign
#                    another certificate with this CA afterwards (node keys need no CA)
#
# These are for development and tests. In production use certificates from your own CA.
set -euo pipefail

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die() { echo "make_certs.sh: $*" >&2; exit 2; }

nodes=0
extra_keys=()
san="IP:127.0.0.1,DNS:localhost"
days=365
force=0
discard_ca_key=0
out=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --nodes) [[ $# -ge 2 ]] || die "--nodes needs a value"; nodes="$2"; shift 2 ;;
    --key) [[ $# -ge 2 ]] || die "--key needs a value"; extra_keys+=("$2"); shift 2 ;;
    --san) [[ $# -ge 2 ]] || die "--san needs a value"; san="$2"; shift 2 ;;
    --days) [[ $# -ge 2 ]] || die "--days needs a value"; days="$2"; shift 2 ;;
    --force) force=1; shift ;;
    --discard-ca-key) discard_ca_key=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) [[ -z "$out" ]] || die "only one OUT_DIR, got '$out' and '$1'"; out="$1"; shift ;;
  esac
done
[[ -n "$out" ]] || { usage >&2; die "OUT_DIR is missing"; }
[[ "$nodes" =~ ^[0-9]+$ ]] || die "--nodes must be a whole number, got '$nodes'"
[[ "$days" =~ ^[0-9]+$ ]] || die "--days must be a whole number, got '$days'"
command -v openssl >/dev/null || die "openssl is not installed (apt-get install openssl)"

umask 077  # before anything is created: the folder (700) and every key (600) are the owner's alone
mkdir -p "$out"

need() {  # need FILE...: true if one of the files is missing, or --force
  [[ $force -eq 1 ]] && return 0
  local f
  for f in "$@"; do [[ -s "$out/$f" ]] || return 0; done
  return 1
}

# --- certificate authority ---------------------------------------------------------------
if [[ $force -eq 0 && -s "$out/ca.crt" && ! -s "$out/ca.key" ]] && need server.key server.pem; then
  die "$out/ca.key was removed, so no server certificate can be signed with this CA; pass --force for a new CA (and copy the new ca.crt to every SuperNode)"
fi
new_key() {  # new_key FILE: a fresh EC private key, mode 600 even where an old one was 644 (openssl keeps a mode)
  rm -f "$1"
  openssl ecparam -name secp384r1 -genkey -noout -out "$1" 2>/dev/null
  chmod 600 "$1"
}

if need ca.crt; then
  new_key "$out/ca.key"
  openssl req -x509 -new -key "$out/ca.key" -sha256 -days "$days" \
    -subj "/O=fedpfn development/CN=fedpfn development CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$out/ca.crt"
  force_server=1
else
  force_server=0
fi

# --- SuperLink server certificate ----------------------------------------------------------
if [[ $force_server -eq 1 ]] || need server.key server.pem; then
  new_key "$out/server.key"
  cat >"$out/server.ext" <<EXT
basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=$san
EXT
  openssl req -new -key "$out/server.key" -subj "/O=fedpfn development/CN=fedpfn SuperLink" \
    -out "$out/server.csr"
  openssl x509 -req -in "$out/server.csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" \
    -CAcreateserial -days "$days" -sha256 -extfile "$out/server.ext" \
    -out "$out/server.pem" 2>/dev/null
  rm -f "$out/server.csr" "$out/server.ext" "$out/ca.srl"
  openssl verify -CAfile "$out/ca.crt" "$out/server.pem" >/dev/null \
    || die "the new server certificate does not verify against the CA"
fi

# --- SuperNode key pairs -------------------------------------------------------------------
# Flower 1.42 reads the private key with cryptography's load_ssh_private_key (OpenSSH
# format, no passphrase) and the public key with load_ssh_public_key, on a NIST curve.
make_node_key() {
  local name="$1" key="$out/$1"
  need "$name" "$name.pub" || return 0
  rm -f "$key" "$key.pub"
  if command -v ssh-keygen >/dev/null; then
    ssh-keygen -q -t ecdsa -b 384 -N "" -C "$name" -f "$key" </dev/null
  else
    # No ssh-keygen: make the EC key with openssl, then write it in OpenSSH format with
    # Python's cryptography (a Flower dependency, so it is where Flower is).
    local py="${PYTHON:-python3}"
    new_key "$key.pem"
    "$py" - "$key.pem" "$key" "$name" <<'PY'
import sys
from cryptography.hazmat.primitives import serialization as s
pem, key, name = sys.argv[1:]
k = s.load_pem_private_key(open(pem, "rb").read(), None)
open(key, "wb").write(k.private_bytes(s.Encoding.PEM, s.PrivateFormat.OpenSSH, s.NoEncryption()))
pub = k.public_key().public_bytes(s.Encoding.OpenSSH, s.PublicFormat.OpenSSH)
open(key + ".pub", "wb").write(pub + b" " + name.encode() + b"\n")
PY
    rm -f "$key.pem"
  fi
  chmod 600 "$key"
  chmod 644 "$key.pub"
}

for ((i = 0; i < nodes; i++)); do make_node_key "node-$i"; done
for name in "${extra_keys[@]}"; do
  [[ "$name" =~ ^[A-Za-z0-9._-]+$ ]] || die "key name '$name' may hold only letters, digits, . _ -"
  make_node_key "$name"
done
chmod 644 "$out/ca.crt" "$out/server.pem"
if [[ $discard_ca_key -eq 1 ]]; then
  rm -f "$out/ca.key"
  echo "make_certs.sh: ca.key removed (--discard-ca-key); ca.crt still verifies the server"
fi
echo "make_certs.sh: certificates and keys in $out"
