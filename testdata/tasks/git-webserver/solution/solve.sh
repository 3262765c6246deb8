#!/bin/bash
# Oracle: sshd with a configuration of its own (nothing of the machine's
# /etc/ssh is touched), a bare repository whose post-receive hook checks
# main out into the web root, and python's http.server over that root.
set -euo pipefail
W=$PWD
mkdir -p /run/sshd
chmod 0755 /run/sshd
rm -rf "$W/project.git" "$W/www" "$W/ssh_host_ed25519_key" "$W/ssh_host_ed25519_key.pub"
git init -q --bare -b main "$W/project.git"
mkdir -p "$W/www"
cat > "$W/project.git/hooks/post-receive" <<HOOK
#!/bin/sh
exec git --git-dir="$W/project.git" --work-tree="$W/www" checkout -f main
HOOK
chmod +x "$W/project.git/hooks/post-receive"

ssh-keygen -q -t ed25519 -N '' -f "$W/ssh_host_ed25519_key"
echo 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKoLcPGaVaN+MgOeN5pzC20gERCgtjcN4gqdmr62Pn6y sandboxd-test-verifier' > "$W/authorized_keys"
chmod 600 "$W/authorized_keys"
cat > "$W/sshd_config" <<CONF
ListenAddress 127.0.0.1:22
HostKey $W/ssh_host_ed25519_key
PidFile $W/sshd.pid
AuthorizedKeysFile $W/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
Subsystem sftp internal-sftp
CONF
/usr/sbin/sshd -t -f "$W/sshd_config"
/usr/sbin/sshd -f "$W/sshd_config"
nohup python3 -m http.server 8080 --bind 127.0.0.1 --directory "$W/www" </dev/null >/dev/null 2>&1 &

up() { python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=1)" "$1" 2>/dev/null; }
for _ in $(seq 100); do
  if up 22 && up 8080; then echo "sshd and the web server are up"; exit 0; fi
  sleep 0.1
done
echo "servers did not come up" >&2
exit 1
