#!/bin/bash
set -e
cd /app
chown eliska:devs /srv/falcon /srv/falcon/README.md /srv/falcon/bin /srv/falcon/bin/backup.sh /srv/falcon/bin/deploy.sh /srv/falcon/bin/healthcheck.py /srv/falcon/bin/sync.sh /srv/falcon/data /srv/falcon/data/records.csv /srv/falcon/exchange /srv/falcon/exchange/handoff.md /srv/falcon/exchange/inbox /srv/falcon/exchange/inbox/notes.txt /srv/falcon/exchange/reports /srv/falcon/exchange/reports/q1.csv /srv/falcon/exchange/todo.txt /srv/falcon/public /srv/falcon/public/about.html /srv/falcon/public/img /srv/falcon/public/img/logo.svg /srv/falcon/public/index.html /srv/falcon/public/style.css /srv/falcon/src /srv/falcon/src/main.py /srv/falcon/src/util.py
chown falcon-svc:devs /srv/falcon/keys /srv/falcon/keys/README.txt /srv/falcon/keys/db.password /srv/falcon/keys/service-account.json /srv/falcon/keys/tls.key /srv/falcon/keys/token.txt /srv/falcon/log /srv/falcon/log/access.log /srv/falcon/log/app.log /srv/falcon/log/error.log
chown root:devs /srv/falcon/etc /srv/falcon/etc/app.conf /srv/falcon/etc/cache.conf /srv/falcon/etc/db.conf /srv/falcon/etc/limits.conf
chmod 0440 /srv/falcon/exchange/reports/q1.csv
chmod 0600 /srv/falcon/keys/README.txt /srv/falcon/keys/db.password /srv/falcon/keys/service-account.json /srv/falcon/keys/tls.key /srv/falcon/keys/token.txt
chmod 0640 /srv/falcon/README.md /srv/falcon/data/records.csv /srv/falcon/etc/app.conf /srv/falcon/etc/cache.conf /srv/falcon/etc/db.conf /srv/falcon/etc/limits.conf /srv/falcon/log/access.log /srv/falcon/log/app.log /srv/falcon/log/error.log /srv/falcon/public/about.html /srv/falcon/src/main.py /srv/falcon/src/util.py
chmod 0644 /srv/falcon/public/img/logo.svg /srv/falcon/public/index.html /srv/falcon/public/style.css
chmod 0660 /srv/falcon/exchange/handoff.md /srv/falcon/exchange/inbox/notes.txt /srv/falcon/exchange/todo.txt
chmod 0700 /srv/falcon/bin/deploy.sh /srv/falcon/keys
chmod 0750 /srv/falcon /srv/falcon/bin /srv/falcon/bin/backup.sh /srv/falcon/bin/healthcheck.py /srv/falcon/bin/sync.sh /srv/falcon/data /srv/falcon/etc /srv/falcon/log /srv/falcon/src
chmod 0755 /srv/falcon/public /srv/falcon/public/img
chmod 2770 /srv/falcon/exchange /srv/falcon/exchange/inbox /srv/falcon/exchange/reports
