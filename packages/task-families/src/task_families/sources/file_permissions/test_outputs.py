import grp
import json
import os
import pwd
import stat

WANT = json.loads("$want")


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
