import grp
import json
import os
import pwd
import stat

WANT = json.loads('{"/srv/falcon": ["eliska", "devs", 488], "/srv/falcon/README.md": ["eliska", "devs", 416], "/srv/falcon/bin": ["eliska", "devs", 488], "/srv/falcon/bin/backup.sh": ["eliska", "devs", 488], "/srv/falcon/bin/deploy.sh": ["eliska", "devs", 448], "/srv/falcon/bin/healthcheck.py": ["eliska", "devs", 488], "/srv/falcon/bin/sync.sh": ["eliska", "devs", 488], "/srv/falcon/data": ["eliska", "devs", 488], "/srv/falcon/data/records.csv": ["eliska", "devs", 416], "/srv/falcon/etc": ["root", "devs", 488], "/srv/falcon/etc/app.conf": ["root", "devs", 416], "/srv/falcon/etc/cache.conf": ["root", "devs", 416], "/srv/falcon/etc/db.conf": ["root", "devs", 416], "/srv/falcon/etc/limits.conf": ["root", "devs", 416], "/srv/falcon/exchange": ["eliska", "devs", 1528], "/srv/falcon/exchange/handoff.md": ["eliska", "devs", 432], "/srv/falcon/exchange/inbox": ["eliska", "devs", 1528], "/srv/falcon/exchange/inbox/notes.txt": ["eliska", "devs", 432], "/srv/falcon/exchange/reports": ["eliska", "devs", 1528], "/srv/falcon/exchange/reports/q1.csv": ["eliska", "devs", 288], "/srv/falcon/exchange/todo.txt": ["eliska", "devs", 432], "/srv/falcon/keys": ["falcon-svc", "devs", 448], "/srv/falcon/keys/README.txt": ["falcon-svc", "devs", 384], "/srv/falcon/keys/db.password": ["falcon-svc", "devs", 384], "/srv/falcon/keys/service-account.json": ["falcon-svc", "devs", 384], "/srv/falcon/keys/tls.key": ["falcon-svc", "devs", 384], "/srv/falcon/keys/token.txt": ["falcon-svc", "devs", 384], "/srv/falcon/log": ["falcon-svc", "devs", 488], "/srv/falcon/log/access.log": ["falcon-svc", "devs", 416], "/srv/falcon/log/app.log": ["falcon-svc", "devs", 416], "/srv/falcon/log/error.log": ["falcon-svc", "devs", 416], "/srv/falcon/public": ["eliska", "devs", 493], "/srv/falcon/public/about.html": ["eliska", "devs", 416], "/srv/falcon/public/img": ["eliska", "devs", 493], "/srv/falcon/public/img/logo.svg": ["eliska", "devs", 420], "/srv/falcon/public/index.html": ["eliska", "devs", 420], "/srv/falcon/public/style.css": ["eliska", "devs", 420], "/srv/falcon/src": ["eliska", "devs", 488], "/srv/falcon/src/main.py": ["eliska", "devs", 416], "/srv/falcon/src/util.py": ["eliska", "devs", 416]}')


def _actual(path):
    st = os.lstat(path)
    return pwd.getpwuid(st.st_uid).pw_name, grp.getgrgid(st.st_gid).gr_name, st.st_mode


def test_all_paths_exist():
    missing = [p for p in WANT if not os.path.exists(p)]
    assert not missing, missing


def test_owners_and_groups():
    wrong = {}
    for path, (owner, group, _) in WANT.items():
        got = _actual(path)[:2]
        if got != (owner, group):
            wrong[path] = got
    assert not wrong, wrong


def test_modes():
    wrong = {}
    for path, (_, _, mode) in WANT.items():
        got = stat.S_IMODE(_actual(path)[2])
        if got != mode:
            wrong[path] = oct(got)
    assert not wrong, wrong
