"""roq.errors: one exception tree, and the registry of result codes both ways."""

import inspect

import client
import roq.errors


def test_every_error_is_a_roq_error_and_no_builtin_is_shadowed():
    import builtins

    for name, obj in inspect.getmembers(roq.errors, inspect.isclass):
        if obj.__module__ == "roq.errors" and issubclass(obj, BaseException):
            assert issubclass(obj, roq.errors.RoQError), name
            assert not hasattr(builtins, name), name


def test_management_errors_carry_their_result_code():
    for cls in (client.NotFoundError, client.BadRequestError, client.UnavailableError):
        err = cls("why", 1104)
        assert isinstance(err, client.ManagementError) and err.code == 1104
    err = client.NotLeaderError("not the leader", data={"Leader": "tcp://127.0.0.1:5003"})
    assert err.leader == "tcp://127.0.0.1:5003" and err.code == 8


def test_a_refused_reply_raises_the_error_registered_for_its_code_and_back():
    from roq.errors import Result, error_for

    for code, cls in ((Result.NOT_FOUND, client.NotFoundError), (Result.BAD_REQUEST, client.BadRequestError),
                      (Result.UNKNOWN_COMMAND, client.BadRequestError), (Result.UNAVAILABLE, client.UnavailableError),
                      (Result.NOT_LEADER, client.NotLeaderError), (Result.FAIL, client.ManagementError)):
        err = error_for(code, "why", {"Leader": "x"})
        assert type(err) is cls and err.code == code and str(err) == "why" and err.data == {"Leader": "x"}
    assert client.NotFoundError("no such queue").code == Result.NOT_FOUND  # raised by a handler: its own code
