from monitor._rule import Ewma, ExchangeLoad, evaluate, saturation_mark

HIGH = 100.0


def run(exchanges, now=10.0, moved_at=None, sustain=2.0, cooldown=5.0):
    return evaluate(exchanges, now=now, high=HIGH, sustain=sustain, cooldown=cooldown, moved_at=moved_at or {})


def test_no_move_before_the_overload_is_sustained():
    hot = ExchangeLoad("a", 150, hot_since=9.0, publishers={"p": 80, "q": 70})
    cold = ExchangeLoad("b", 10)
    assert run([hot, cold]) == ([], [])


def test_most_productive_publisher_that_fits_moves_to_the_least_loaded():
    hot = ExchangeLoad("a", 160, hot_since=5.0, publishers={"p": 95, "q": 40, "r": 25})
    warm = ExchangeLoad("b", 50)
    cool = ExchangeLoad("c", 20)
    moves, limits = run([hot, warm, cool])
    assert limits == []
    assert [(m.publisher, m.source, m.target) for m in moves] == [("q", "a", "c")]  # p (95) would push c to 115
    assert "q" in moves[0].describe() and "160" in moves[0].describe()


def test_cooling_down_publishers_stay_put():
    hot = ExchangeLoad("a", 150, hot_since=0.0, publishers={"p": 80, "q": 70})
    moves, _ = run([hot, ExchangeLoad("b", 0)], moved_at={"p": 8.0})
    assert [m.publisher for m in moves] == ["q"]


def test_a_publisher_above_the_mark_alone_is_a_limit_case():
    hot = ExchangeLoad("a", 130, hot_since=0.0, publishers={"big": 130})
    moves, limits = run([hot, ExchangeLoad("b", 0)])
    assert moves == []
    assert [(c.exchange, c.publisher) for c in limits] == [("a", "big")]


def test_no_target_accepting_publishers_means_no_move():
    hot = ExchangeLoad("a", 150, hot_since=0.0, publishers={"p": 60, "q": 90})
    draining = ExchangeLoad("b", 0, accepts=False)
    assert run([hot, draining]) == ([], [])


def test_one_move_per_hot_exchange_and_books_updated_between_them():
    a = ExchangeLoad("a", 150, hot_since=0.0, publishers={"p": 60, "q": 90})
    b = ExchangeLoad("b", 140, hot_since=0.0, publishers={"r": 50, "s": 90})
    c = ExchangeLoad("c", 0)
    moves, _ = run([a, b, c])
    assert [(m.publisher, m.target) for m in moves] == [("q", "c")]  # after it, c is at 90: r (50) no longer fits


def test_ewma_smooths_and_starts_at_the_first_sample():
    e = Ewma(0.5)
    assert e.add(100) == 100
    assert e.add(0) == 50
    assert e.add(0) == 25


def test_an_exchange_saturated_below_the_mark_is_hot_and_its_publishers_go_where_there_is_room():
    # a hosts' small budget: "a" forwards 60 rec/s busy all the time, far below the queue's mark of 100
    a = ExchangeLoad("a", 60, hot_since=0.0, publishers={"p": 30, "q": 20, "r": 10}, mark=51)
    b = ExchangeLoad("b", 20, mark=40)  # busy half its time at 20 rec/s: room for 20 more
    c = ExchangeLoad("c", 10, mark=12)  # the least loaded, but saturated already
    moves, limits = run([a, b, c])
    assert limits == []
    assert [(m.publisher, m.target) for m in moves] == [("r", "b")]  # relative load: b has room, c none
    assert "its saturation mark 51" in moves[0].describe()


def test_a_lone_publisher_that_saturates_its_exchange_is_a_limit_case_and_a_full_target_takes_nobody():
    a = ExchangeLoad("a", 60, hot_since=0.0, publishers={"big": 60}, mark=51)
    stuck: list[str] = []
    moves, limits = evaluate([a, ExchangeLoad("b", 0)], now=10.0, high=HIGH, sustain=2.0, cooldown=5.0, moved_at={},
                             stuck=stuck)
    assert moves == [] and stuck == [] and "above its saturation mark 51" in limits[0].describe()
    both = [ExchangeLoad("a", 60, hot_since=0.0, publishers={"p": 30, "q": 30}, mark=51),
            ExchangeLoad("b", 60, hot_since=0.0, publishers={"r": 60}, mark=51)]
    moves, _ = evaluate(both, now=10.0, high=HIGH, sustain=2.0, cooldown=5.0, moved_at={}, stuck=stuck)
    assert moves == [] and stuck == ["a"]  # saturated everywhere: the scaling rule asks for an exchange


def saturated(name, counts, mark=50.0, load=60.0):
    rate = load / counts
    return ExchangeLoad(name, load, hot_since=0.0, publishers={f"{name}{i}": rate for i in range(counts)}, mark=mark)


def test_between_saturated_exchanges_a_publisher_moves_where_its_share_would_be_larger():
    # a lone publisher fills "b" by itself: no exchange has room, yet a's five publishers get a fifth of a's
    # mark each and would get half of b's
    stuck: list[str] = []
    moves, limits = evaluate([saturated("a", 5), saturated("b", 1)], now=10.0, high=HIGH, sustain=2.0, cooldown=5.0,
                             moved_at={}, stuck=stuck)
    assert [c.publisher for c in limits] == ["b0"] and stuck == ["a"]  # a new exchange would still help a
    assert [(m.source, m.target) for m in moves] == [("a", "b")]
    assert "saturated too: 10 -> 25 rec/s per publisher" in moves[0].describe()


def test_saturated_exchanges_even_out_and_then_stay():
    assert [(m.source, m.target) for m in run([saturated("a", 4), saturated("b", 2)])[0]] == [("a", "b")]
    assert run([saturated("a", 3), saturated("b", 3)])[0] == []
    # a publisher on its way counts where it goes: four left on a, one on b and one moving there is 4 against 2
    b = saturated("b", 1)
    b.arriving = 1
    assert [(m.source, m.target) for m in run([saturated("a", 4), b])[0]] == [("a", "b")]
    b.arriving = 2
    assert run([saturated("a", 3), b])[0] == []  # 3 against 3
    # unequal marks: 556 / 4 against 404 / 3 is no gain worth a move
    assert run([saturated("a", 4, mark=556, load=600), saturated("b", 2, mark=404, load=420)])[0] == []
    # the least loaded target that is not saturated is not where shares are evened out
    assert run([saturated("a", 4), ExchangeLoad("b", 99, publishers={"r": 99})])[0] == []


def test_saturation_mark_estimates_what_an_exchange_forwards_at_the_busy_limit():
    assert saturation_mark(1000.0, 400.0, 0.5, 0.85) == 680.0  # 800 rec/s at busy 1, 85% of it
    assert saturation_mark(1000.0, 400.0, 0.2, 0.85) == 1000.0  # room beyond the queue's mark
    assert saturation_mark(1000.0, 400.0, 0.05, 0.85) == 1000.0  # too idle to say
    assert saturation_mark(1000.0, 400.0, 1.0, 1.0) == 400.0  # busy all the time: at its mark, not above
